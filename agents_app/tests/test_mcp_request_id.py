"""The turn's request id reaches MCP servers on every call, though turns share one pooled session:
in the request's `_meta` over every transport, and as `X-Request-Id` over HTTP (docs/runtime.md)."""
import json

import pytest
from asgiref.sync import sync_to_async

from agents_app.mcp.connect import REQUEST_ID_META_KEY
from agents_app.mcp.pool import mcp_pool
from agents_app.models import McpService
from agents_app.runtime.context import RunContext
from agents_app.runtime.events import ToolResult
from agents_app.runtime.loop import run_turn

pytestmark = pytest.mark.django_db(transaction=True)

FIRST, SECOND = "a1b2c3d4e5f60718", "3F2504E0-4F89-11D3-9A0C-0305E82C3301"


@pytest.fixture(autouse=True)
def _pool(mcp_pool_cleanup):
    return mcp_pool_cleanup


async def _request_info(agent, llm, service: McpService, request_id: str) -> dict:
    """One turn (request id `request_id`) that calls the server's `request_info`; what it saw."""
    llm.reply_tool_calls((f"{service.name}__request_info", {}))
    llm.reply_text("好的")
    ctx = RunContext(request_id=request_id, conversation_id="conv-1")
    events = [e async for e in run_turn(agent=agent, history=[{"role": "user", "content": "查一下"}], ctx=ctx)]
    [result] = [e for e in events if isinstance(e, ToolResult)]
    assert result.ok, result.content
    return json.loads(result.content)


async def test_each_turn_sends_its_own_request_id_over_the_shared_session(
    any_mcp_service, agent_factory, llm_settings, mcp_spawn_log
):
    agent = await sync_to_async(agent_factory)(mcp_services=[any_mcp_service])
    first = await _request_info(agent, llm_settings, any_mcp_service, FIRST)
    session = mcp_pool()._sessions[(any_mcp_service.pk, None)]
    second = await _request_info(agent, llm_settings, any_mcp_service, SECOND)

    assert mcp_pool()._sessions[(any_mcp_service.pk, None)] is session  # one pooled session for both turns
    assert [first["meta"][REQUEST_ID_META_KEY], second["meta"][REQUEST_ID_META_KEY]] == [FIRST, SECOND]
    if any_mcp_service.protocol == McpService.Protocol.STDIO:
        assert first["headers"] is None  # no HTTP: `_meta` is the only carrier
        assert len(mcp_spawn_log.read_text().split()) == 1
    else:
        assert [first["headers"]["x-request-id"], second["headers"]["x-request-id"]] == [FIRST, SECOND]
    # Tracing is off: nothing invents a trace context.
    assert "traceparent" not in first["meta"] and not (first["headers"] or {}).get("traceparent")


async def test_request_id_goes_in_meta_on_a_handshake_era_session(mcp_service_http, agent_factory, llm_settings,
                                                                  monkeypatch):
    """Servers older than 2026-07-28 get the id in `_meta` too (every revision the SDK speaks
    allows extra `_meta` keys on a request): the client pinned to the initialize handshake."""
    from agents_app.mcp import connect

    class HandshakeClient(connect.Client):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, mode="legacy", **kwargs)

    monkeypatch.setattr(connect, "Client", HandshakeClient)
    agent = await sync_to_async(agent_factory)(mcp_services=[mcp_service_http])
    seen = await _request_info(agent, llm_settings, mcp_service_http, FIRST)
    assert seen["protocol_version"] == "2025-11-25"
    # Beside it only the progress token the SDK adds: every call asks for progress (the chip shows it).
    assert seen["meta"] == {REQUEST_ID_META_KEY: FIRST, "progress_token": seen["meta"]["progress_token"]}
    assert seen["headers"]["x-request-id"] == FIRST
