"""One request id on every hop, and the campus token nowhere but the sub-agent (docs/design.md#cross-cutting-rules)."""
import base64
import json

import pytest
from django.conf import settings
from loguru import logger

from agents_app.models import McpService
from campus_agent.base.logging import LOG_FORMAT
from chat_app.models import Message
from subagents_app.client import TOKEN_EXPIRED_NOTICE
from testkit.mcp.servers import serve_http
from testkit.web.sse import chat
from testkit.web.tcp_tap import TcpTap

pytestmark = pytest.mark.django_db(transaction=True)

REQUEST_ID = "0123456789abcdef"
CANARY = "CANARY-campus-token-9f8e7d6c5b4a3210"
# Modules that log on behalf of a chat request in the gateway process.
REQUEST_MODULES = ("chat_app.", "agents_app.runtime.", "subagents_app.client", "campus_agent.base.request_id")


@pytest.fixture
def log_lines():
    lines: list[str] = []
    sink = logger.add(lines.append, format=LOG_FORMAT, level="DEBUG")
    yield lines
    logger.remove(sink)


@pytest.fixture
def tapped_mcp(db):
    """The MCP tools over streamable-http, reached through a TCP tap that records the traffic."""
    server = serve_http("streamable-http")
    tap = TcpTap("127.0.0.1", server.port)
    service = McpService.objects.create(
        name="http-tools", protocol="streamable-http", config={"url": f"http://127.0.0.1:{tap.port}/mcp"}, timeout_sec=5
    )
    yield service, tap
    tap.close()
    server.stop()


def _jwt_payload(token: str) -> str:
    return base64.urlsafe_b64decode(token.split(".")[1] + "==").decode()


def test_request_id_and_campus_token_on_every_hop(
    live_asgi, llm_settings, agent, tapped_mcp, subagent_server, user, token_for, log_lines
):
    mcp_service, tap = tapped_mcp
    agent.mcp_services.add(mcp_service)
    token = token_for(user, campus_token=CANARY)
    llm_settings.reply_tool_calls(("call_canteen", {"message": "今天吃啥"}), ("http-tools__echo", {"text": "回声"}))
    llm_settings.reply_text("都查好了。")
    log_lines.clear()  # only the request's own lines from here on

    result = chat(live_asgi, {"message": "今天吃啥"}, headers={"Authorization": f"Bearer {token}", "X-Request-Id": REQUEST_ID})

    assert result.status == 200 and result.types[-1] == "done"
    assert {r["tool"]: r["ok"] for r in result.of("tool_result")} == {"call_canteen": True, "http-tools__echo": True}
    conversation_id = result.frames[0]["conversation_id"]
    # Request id: response header, session frame, stored rows, LLM calls, sub-agent call, log lines.
    assert result.headers["x-request-id"] == REQUEST_ID
    assert result.frames[0]["request_id"] == REQUEST_ID
    rows = Message.objects.filter(conversation_id=conversation_id)
    assert rows.count() == 5 and {r.request_id for r in rows} == {REQUEST_ID}
    assert [r.headers["x-request-id"] for r in llm_settings.requests] == [REQUEST_ID, REQUEST_ID]
    sub_call = subagent_server.last_request
    assert sub_call.headers["x-request-id"] == REQUEST_ID
    assert sub_call.headers["x-parent-conversation-id"] == conversation_id
    ours = [line for line in log_lines if any(f"| {m}" in line for m in REQUEST_MODULES)]
    logged_modules = {line.split(" | ")[3].split(":")[0] for line in ours}
    assert {"chat_app.runs.engine", "agents_app.runtime.loop", "subagents_app.client"} <= logged_modules
    assert all(f"request_id={REQUEST_ID}" in line for line in ours), [line for line in ours if REQUEST_ID not in line]

    # Campus token: to the sub-agent (the one place it belongs) and nowhere else.
    assert sub_call.headers["authorization"] == f"Bearer {CANARY}"
    assert b"echo" in tap.traffic and CANARY.encode() not in tap.traffic  # MCP traffic, both ways
    for request in llm_settings.requests:
        assert CANARY not in json.dumps(request.body, ensure_ascii=False) + json.dumps(request.headers)
    assert CANARY not in result.raw
    assert CANARY not in _jwt_payload(token)
    assert not any(CANARY in line for line in log_lines)
    log_file = settings.LOG_DIR / "campus_agent.log"
    if log_file.exists():
        assert CANARY not in log_file.read_text(encoding="utf-8", errors="replace")
    assert not rows.filter(content__contains=CANARY).exists()


def test_campus_token_expired_error_does_not_leak_the_token(
    live_asgi, llm_settings, agent, subagent_server, user, token_for, log_lines
):
    token = token_for(user, campus_token=CANARY)
    llm_settings.reply_tool_calls(("call_canteen", {"message": "[[mode:expired]] 查课表"}))
    llm_settings.reply_text("你的校园登录已过期。")
    result = chat(live_asgi, {"message": "查课表"}, headers={"Authorization": f"Bearer {token}"})
    assert subagent_server.last_request.headers["authorization"] == f"Bearer {CANARY}"
    errors = result.of("error")
    assert errors and errors[0] == {"type": "error", "code": 40102, "message": TOKEN_EXPIRED_NOTICE}
    assert result.types[-1] == "done"
    assert CANARY not in result.raw
    assert not any(CANARY in line for line in log_lines)
    for request in llm_settings.requests:
        assert CANARY not in json.dumps(request.body, ensure_ascii=False)
