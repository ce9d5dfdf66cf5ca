"""The campus agent as an MCP server (docs/design.md#other-clients, chat_app/gateways/mcp_server.py), end to end: the whole
project on loopback (`live_asgi`), the official `mcp` client (streamable HTTP + ClientSession) on
the other side, the scripted model and the contract sub-agent behind it. Plain httpx where the
test is the HTTP itself (401, metadata, bodies no client would send)."""
import asyncio
import json
import threading
import uuid
from contextlib import asynccontextmanager

import httpx
import httpx2
import mcp_types as types
import pytest
from asgiref.sync import sync_to_async
from mcp import Client
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from campus_agent.base import errors
from chat_app.accounts.api_keys import api_key_create
from chat_app.gateways.mcp_server import (
    GENERIC_ABOUT,
    INPUT_SCHEMA,
    METADATA_PATH,
    MSG_ARGUMENTS_UNKNOWN,
    MSG_TOOL_CALL,
    OUTPUT_SCHEMA,
    PROMPT_SUMMARY_MAX,
    agent_tools_read,
    prompt_summary,
)
from chat_app.models import Conversation, Message, Run
from testkit.model.fake_llm import Reply
from testkit.polling import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

CALL_TIMEOUT = 20


@pytest.fixture
def canteen_agent(agent_factory, sub_agent_factory):
    """The default agent `xiaozhi` (校园小智) with the 食堂助手 sub-agent (tool `call_canteen`)."""
    return agent_factory(sub_agents=[sub_agent_factory(display_name="食堂助手", timeout_sec=10)])


@pytest.fixture
def api_key(user) -> str:
    return api_key_create(user=user, name="VS Code")[1]


@asynccontextmanager
async def mcp_session(base_url: str, token: str | None):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(CALL_TIMEOUT)) as http:
        async with streamable_http_client(f"{base_url}/mcp", http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


@asynccontextmanager
async def mcp_client(base_url: str, token: str):
    """The SDK's high-level `Client` (mode "auto": `server/discover`, then the 2026-07-28 wire)."""
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"},
                                  timeout=httpx2.Timeout(CALL_TIMEOUT)) as http:
        async with Client(streamable_http_client(f"{base_url}/mcp", http_client=http)) as client:
            yield client


def _rows(conversation_id: str) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in Message.objects.filter(conversation_id=conversation_id)
            .order_by("created_at", "seq")]


async def test_lists_one_tool_per_enabled_agent_with_its_schemas(live_asgi, user_token, canteen_agent, agent_factory):
    await sync_to_async(agent_factory)(slug="course-helper", name="选课助手", is_default=False)
    await sync_to_async(agent_factory)(slug="hidden", name="停用的", is_default=False, enabled=False)
    async with mcp_session(live_asgi, user_token) as session:
        tools = (await session.list_tools()).tools
    assert [t.name for t in tools] == ["ask_xiaozhi", "ask_course_helper"]
    ask = tools[0]
    assert ask.title == "校园小智" and "「校园小智」" in ask.description and "食堂助手" in ask.description
    assert ask.input_schema == INPUT_SCHEMA and ask.output_schema == OUTPUT_SCHEMA
    assert ask.input_schema["required"] == ["message"]


def test_a_new_agents_tool_is_described_by_its_prompt(agent_factory):
    """Not the generic sentence whatever the prompt says (issue 42): the prompt's first sentence,
    said of the agent, capped."""
    agent_factory(slug="freshman", name="新生助手",
                  system_prompt="你是新生入学助手，只回答报到、宿舍和军训的问题。\n其余问题请让学生找辅导员。")
    agent_factory(slug="long", name="长说明", is_default=False, system_prompt="Answers questions. " + "很长" * 200)
    agent_factory(slug="empty", name="空提示词", is_default=False, system_prompt="")
    tools = {tool.slug: tool.description for tool in agent_tools_read(user=None)}
    assert tools["freshman"].startswith("向校园小智的「新生助手」提问。它是新生入学助手，只回答报到、宿舍和军训的问题。")
    assert "辅导员" not in tools["freshman"] and GENERIC_ABOUT not in tools["freshman"]
    assert tools["long"].startswith("向校园小智的「长说明」提问。Answers questions.")
    assert len(prompt_summary("很长" * 200)) == PROMPT_SUMMARY_MAX + 1 and prompt_summary("很长" * 200).endswith("…")
    assert prompt_summary("You are the library helper. Be brief.") == "It is the library helper."
    assert GENERIC_ABOUT in tools["empty"]


def test_two_slugs_that_make_one_tool_name_keep_the_first_agent(agent_factory):
    agent_factory(slug="course-helper", name="选课助手")
    agent_factory(slug="course_helper", name="另一个", is_default=False)
    assert [(t.name, t.title) for t in agent_tools_read(user=None)] == [("ask_course_helper", "选课助手")]


async def test_an_agent_enabled_or_disabled_in_admin_shows_on_the_next_list(live_asgi, user_token, canteen_agent):
    async with mcp_session(live_asgi, user_token) as session:
        assert [t.name for t in (await session.list_tools()).tools] == ["ask_xiaozhi"]
        canteen_agent.enabled = False
        await sync_to_async(canteen_agent.save)()
        assert (await session.list_tools()).tools == []


@pytest.mark.parametrize("credential", ["jwt", "api_key"])
async def test_a_call_answers_with_text_and_structured_content(
    credential, live_asgi, llm_settings, canteen_agent, user_token, api_key, user
):
    llm_settings.reply_text("今天中午有红烧肉。")
    token = user_token if credential == "jwt" else api_key
    async with mcp_session(live_asgi, token) as session:
        result = await session.call_tool("ask_xiaozhi", {"message": "今天中午吃啥", "conversation_id": None})
    assert result.is_error is False
    assert [c.text for c in result.content] == ["今天中午有红烧肉。"]
    structured = result.structured_content
    assert set(structured) == {"answer", "conversation_id", "run_id"} and structured["answer"] == "今天中午有红烧肉。"
    conversation = await sync_to_async(Conversation.objects.get)(id=structured["conversation_id"])
    assert conversation.user_id == user.id
    run = await sync_to_async(Run.objects.get)(id=structured["run_id"])
    assert run.status == Run.Status.FINISHED and str(run.conversation_id) == structured["conversation_id"]
    assert await sync_to_async(_rows)(structured["conversation_id"]) == [
        ("user", "今天中午吃啥"), ("assistant", "今天中午有红烧肉。")
    ]


async def test_an_answer_carries_its_implicit_label_in_meta(live_asgi, llm_settings, canteen_agent, user_token, settings):
    """GB 45438-2025 (docs/safety.md, "Labels"): the result's `_meta` holds `aigc`, naming the
    stored answer, the producer and who answered."""
    settings.AIGC_CONTENT_PRODUCER = "示例大学"
    llm_settings.reply_text("今天中午有红烧肉。")
    async with mcp_session(live_asgi, user_token) as session:
        result = await session.call_tool("ask_xiaozhi", {"message": "今天中午吃啥"})
    run = await sync_to_async(Run.objects.get)(id=result.structured_content["run_id"])
    assert result.meta == {"aigc": {
        "Label": "1", "ContentProducer": "示例大学", "ProduceID": str(run.message_id),
        "ReservedCode1": "", "ContentPropagator": "", "PropagateID": "", "ReservedCode2": "",
        "provider": "default", "model": "fake-model",
    }}


async def test_a_second_call_with_the_conversation_id_continues_it(live_asgi, llm_settings, canteen_agent, user_token):
    llm_settings.reply_text("红烧肉。")
    llm_settings.reply_text("八块钱。")
    async with mcp_session(live_asgi, user_token) as session:
        first = await session.call_tool("ask_xiaozhi", {"message": "中午吃啥"})
        conversation_id = first.structured_content["conversation_id"]
        second = await session.call_tool("ask_xiaozhi", {"message": "多少钱", "conversation_id": conversation_id})
    assert second.structured_content["conversation_id"] == conversation_id
    assert second.structured_content["run_id"] != first.structured_content["run_id"]
    assert await sync_to_async(_rows)(conversation_id) == [
        ("user", "中午吃啥"), ("assistant", "红烧肉。"), ("user", "多少钱"), ("assistant", "八块钱。")
    ]
    sent = [(m["role"], m["content"]) for m in llm_settings.requests[-1].body["messages"] if m["role"] != "system"]
    assert sent == [("user", "中午吃啥"), ("assistant", "红烧肉。"), ("user", "多少钱")]


async def test_progress_is_reported_while_a_tool_runs_and_the_text_streams(
    live_asgi, llm_settings, canteen_agent, user_token, subagent_server, settings
):
    settings.MCP_PROGRESS_INTERVAL_SEC = 0.0  # every chunk: the test counts them, not the clock
    llm_settings.reply_tool_calls(("call_canteen", {"message": "今天的菜单"}), text="我查一下。")
    llm_settings.queue(Reply(text="一食堂有红烧肉和青菜。", chunk_delay=0.02))
    progress: list[tuple[float, str | None]] = []

    async def on_progress(value, total, message) -> None:
        progress.append((value, message))

    async with mcp_session(live_asgi, user_token) as session:
        result = await session.call_tool("ask_xiaozhi", {"message": "食堂有什么"}, progress_callback=on_progress)
    # The text before the tool call and the answer after it: two paragraphs, as on the page (issue 42).
    assert result.is_error is False and result.structured_content["answer"] == "我查一下。\n\n一食堂有红烧肉和青菜。"
    messages = [m for _, m in progress]
    assert MSG_TOOL_CALL.format(label="食堂助手") in messages
    assert "食堂助手 已完成" in messages
    assert messages.index("调用 食堂助手…") < messages.index("食堂助手 已完成")
    writing = [m for m in messages if m.startswith("正在回答")]
    assert len(writing) >= 3 and writing[-1] == f"正在回答…（已写 {len(result.structured_content['answer'])} 字）"
    values = [v for v, _ in progress]
    assert values == sorted(values) and len(set(values)) == len(values)  # increasing, as the spec asks


async def test_no_progress_token_no_progress(live_asgi, llm_settings, canteen_agent, user_token):
    llm_settings.reply_text("好的。")
    seen = []

    async def handler(message) -> None:
        seen.append(message)

    headers = {"Authorization": f"Bearer {user_token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(CALL_TIMEOUT)) as http:
        async with streamable_http_client(f"{live_asgi}/mcp", http_client=http) as (read, write):
            async with ClientSession(read, write, message_handler=handler) as session:
                await session.initialize()
                result = await session.call_tool("ask_xiaozhi", {"message": "你好"})
    assert result.structured_content["answer"] == "好的。"
    assert not [m for m in seen if isinstance(m, types.ProgressNotification)]


async def test_cancelling_a_call_stops_its_run_and_stores_the_reply_as_interrupted(
    live_asgi, llm_settings, canteen_agent, user_token
):
    release = threading.Event()
    llm_settings.queue(Reply(text="第一句。第二句还没说完", hold_after_chunks=2, release=release))
    started: asyncio.Event = asyncio.Event()

    async def on_progress(value, total, message) -> None:
        if message and message.startswith("正在回答"):
            started.set()

    try:
        async with mcp_session(live_asgi, user_token) as session:
            call = asyncio.create_task(
                session.call_tool("ask_xiaozhi", {"message": "说两句"}, progress_callback=on_progress)
            )
            await asyncio.wait_for(started.wait(), CALL_TIMEOUT)
            call.cancel()  # the client sends notifications/cancelled for the request
            with pytest.raises(asyncio.CancelledError):
                await call
            run = await sync_to_async(wait_for)(
                lambda: Run.objects.filter(status=Run.Status.INTERRUPTED).first(), timeout=10
            )
    finally:
        release.set()
    reply = await sync_to_async(lambda: Message.objects.get(conversation_id=run.conversation_id, role="assistant"))()
    assert reply.meta.get("interrupted") is True and reply.content.startswith("第一")


async def test_an_answer_cut_by_a_failure_is_a_tool_error_that_still_names_the_conversation(
    live_asgi, llm_settings, canteen_agent, user_token
):
    llm_settings.queue(Reply(text="回答到一半就断了", error_after_chunks=2))
    async with mcp_session(live_asgi, user_token) as session:
        result = await session.call_tool("ask_xiaozhi", {"message": "你好"})
    assert result.is_error is True
    assert result.content[0].text == "回答到一" and result.content[-1].text.startswith("校园小智没能回答：")
    conversation_id = result.structured_content["conversation_id"]  # the question is stored: ask again there
    assert (await sync_to_async(_rows)(conversation_id))[0] == ("user", "你好")


async def test_unknown_tool_is_a_protocol_error(live_asgi, canteen_agent, user_token):
    async with mcp_session(live_asgi, user_token) as session:
        with pytest.raises(MCPError) as raised:
            await session.call_tool("ask_nobody", {"message": "你好"})
    assert raised.value.code == types.INVALID_PARAMS and "ask_nobody" in raised.value.message


@pytest.mark.parametrize(("arguments", "message"), [
    ({"message": "长" * 8001}, errors.MSG_MESSAGE_TOO_LONG),
    ({"message": "   "}, errors.MSG_MESSAGE_MISSING),
    ({}, errors.MSG_MESSAGE_MISSING),
    ({"message": 42}, errors.MSG_FIELD_TYPE.format(field="message")),
    ({"message": ["a"]}, errors.MSG_FIELD_TYPE.format(field="message")),
    ({"message": "a\x00b"}, errors.MSG_NUL_CHARACTER.format(field="message")),
    ({"message": "你好", "conversation_id": "not-a-uuid"}, errors.MSG_CONVERSATION_ID),
    ({"message": "你好", "conversation_id": 7}, errors.MSG_CONVERSATION_ID),
    ({"message": "你好", "agent": "other"}, MSG_ARGUMENTS_UNKNOWN.format(names="agent")),
])
async def test_hostile_arguments_are_a_tool_error_and_nothing_is_stored(
    arguments, message, live_asgi, llm_settings, canteen_agent, user_token
):
    async with mcp_session(live_asgi, user_token) as session:
        result = await session.call_tool("ask_xiaozhi", arguments)
    assert result.is_error is True and [c.text for c in result.content] == [message]
    assert result.structured_content is None
    assert await sync_to_async(Conversation.objects.count)() == 0 and llm_settings.requests == []


async def test_another_users_conversation_is_not_found(live_asgi, llm_settings, canteen_agent, user_token, other_user):
    theirs = await sync_to_async(Conversation.objects.create)(user=other_user, agent=canteen_agent, title="别人的")
    async with mcp_session(live_asgi, user_token) as session:
        other = await session.call_tool("ask_xiaozhi", {"message": "你好", "conversation_id": str(theirs.id)})
        missing = await session.call_tool("ask_xiaozhi", {"message": "你好", "conversation_id": str(uuid.uuid4())})
    assert other.is_error is True and [c.text for c in other.content] == [errors.MSG_NOT_FOUND]
    assert [c.text for c in missing.content] == [c.text for c in other.content]  # indistinguishable
    assert await sync_to_async(Message.objects.count)() == 0 and llm_settings.requests == []


async def test_a_turn_over_the_rate_limit_is_a_tool_error_with_the_chinese_message(
    live_asgi, llm_settings, canteen_agent, user_token, settings
):
    settings.CHAT_RATE_PER_MINUTE = 1
    llm_settings.reply_text("第一次。")
    async with mcp_session(live_asgi, user_token) as session:
        first = await session.call_tool("ask_xiaozhi", {"message": "一"})
        second = await session.call_tool("ask_xiaozhi", {"message": "二"})
    assert first.is_error is False
    assert second.is_error is True and [c.text for c in second.content] == [errors.MSG_RATE_LIMITED]


# --- the 2026-07-28 wire (no handshake; cancelling is closing the response stream) ------------------

async def test_a_2026_client_lists_calls_and_gets_progress(live_asgi, llm_settings, canteen_agent, api_key, settings):
    settings.MCP_PROGRESS_INTERVAL_SEC = 0.0
    llm_settings.reply_tool_calls(("call_canteen", {"message": "菜单"}), text="")
    llm_settings.queue(Reply(text="有面条。", chunk_delay=0.02))
    progress = []

    async def on_progress(value, total, message) -> None:
        progress.append(message)

    async with mcp_client(live_asgi, api_key) as client:
        assert client.protocol_version == "2026-07-28"
        assert [t.name for t in (await client.list_tools()).tools] == ["ask_xiaozhi"]
        result = await client.call_tool("ask_xiaozhi", {"message": "吃啥"}, progress_callback=on_progress)
    assert result.is_error is False and result.structured_content["answer"] == "有面条。"
    assert "调用 食堂助手…" in progress and any(m.startswith("正在回答") for m in progress)


async def test_a_2026_client_closing_the_stream_stops_the_run(live_asgi, llm_settings, canteen_agent, api_key):
    release = threading.Event()
    llm_settings.queue(Reply(text="第一句。第二句还没说完", hold_after_chunks=2, release=release))
    started = asyncio.Event()

    async def on_progress(value, total, message) -> None:
        if message and message.startswith("正在回答"):
            started.set()

    try:
        async with mcp_client(live_asgi, api_key) as client:
            call = asyncio.create_task(client.call_tool("ask_xiaozhi", {"message": "说"}, progress_callback=on_progress))
            await asyncio.wait_for(started.wait(), CALL_TIMEOUT)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            run = await sync_to_async(wait_for)(
                lambda: Run.objects.filter(status=Run.Status.INTERRUPTED).first(), timeout=10
            )
    finally:
        release.set()
    reply = await sync_to_async(lambda: Message.objects.get(conversation_id=run.conversation_id, role="assistant"))()
    assert reply.meta.get("interrupted") is True


# --- HTTP: auth, metadata, bodies ------------------------------------------------------------------

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "curl", "version": "1"}}}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.mark.parametrize("authorization", [None, "Bearer", "Bearer nope", "Bearer cak_" + "x" * 32, "Basic abc"])
def test_401_without_a_valid_token_names_the_metadata_document(authorization, live_asgi, canteen_agent):
    headers = {**ACCEPT, **({"Authorization": authorization} if authorization else {})}
    answer = httpx.post(f"{live_asgi}/mcp", json=INIT, headers=headers)
    assert answer.status_code == 401
    challenge = answer.headers["WWW-Authenticate"]
    assert challenge.startswith(f'Bearer resource_metadata="{live_asgi}{METADATA_PATH}"')
    assert ('error="invalid_token"' in challenge) == (authorization not in (None, "Bearer", "Basic abc"))
    assert answer.headers["X-Request-Id"] and answer.headers["X-Accel-Buffering"] == "no"

    document = httpx.get(f"{live_asgi}{METADATA_PATH}")
    assert document.status_code == 200 and document.headers["content-type"].startswith("application/json")
    body = document.json()
    assert body["resource"] == f"{live_asgi}/mcp"
    assert body["authorization_servers"] == [] and body["bearer_methods_supported"] == ["header"]
    assert body["resource_documentation"] == f"{live_asgi}/docs/clients.md#mcp-clients"
    docs = httpx.get(f"{live_asgi}/docs/clients.md")
    assert docs.status_code == 200 and "## MCP clients" in docs.text


def test_a_revoked_key_is_refused(live_asgi, canteen_agent, user, api_key):
    from chat_app.models import ApiKey

    ApiKey.objects.filter(user=user).update(revoked_at="2026-01-01T00:00:00Z")
    answer = httpx.post(f"{live_asgi}/mcp", json=INIT, headers={**ACCEPT, "Authorization": f"Bearer {api_key}"})
    assert answer.status_code == 401


def test_a_page_elsewhere_is_refused_by_origin(live_asgi, canteen_agent, user_token):
    headers = {**ACCEPT, "Authorization": f"Bearer {user_token}", "Origin": "https://evil.example"}
    answer = httpx.post(f"{live_asgi}/mcp", json=INIT, headers=headers)
    assert answer.status_code == 403


@pytest.mark.parametrize("body", [
    b"not json at all",
    b"{",
    json.dumps({"jsonrpc": "1.0", "id": 1, "method": "tools/list"}).encode(),
    json.dumps([{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, {"jsonrpc": "2.0", "id": 2,
                "method": "tools/list"}]).encode(),
    json.dumps({"jsonrpc": "2.0", "id": 1}).encode(),
    json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": "x"}).encode(),
    json.dumps({"jsonrpc": "2.0", "id": 1, "method": "no/such/method"}).encode(),
    json.dumps("just a string").encode(),
    "\ud800".encode("utf-8", "surrogatepass"),
    b"\xff\xfe",
])
@pytest.mark.parametrize("version", ["2025-11-25", "2026-07-28"])
def test_bad_jsonrpc_bodies_get_clean_errors_never_5xx(body, version, live_asgi, canteen_agent, user_token):
    headers = {**ACCEPT, "Authorization": f"Bearer {user_token}", "Mcp-Protocol-Version": version}
    answer = httpx.post(f"{live_asgi}/mcp", content=body, headers=headers)
    assert 200 <= answer.status_code < 500, answer.text
    payload = _jsonrpc_payload(answer)
    assert payload["jsonrpc"] == "2.0" and "error" in payload, payload


@pytest.mark.parametrize("method", ["GET", "DELETE", "PUT", "PATCH"])
def test_other_methods_are_refused_cleanly(method, live_asgi, canteen_agent, user_token):
    answer = httpx.request(method, f"{live_asgi}/mcp", headers={**ACCEPT, "Authorization": f"Bearer {user_token}"},
                           timeout=10)
    assert 400 <= answer.status_code < 500, answer.text
    if method == "GET":  # no standalone stream held open per client: stateless serving has nothing for it
        assert answer.status_code == 405 and answer.headers["Allow"] == "POST"


def test_an_8_mb_body_is_refused_before_it_is_read(live_asgi, canteen_agent, user_token):
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": "ask_xiaozhi", "arguments": {"message": "x" * (8 * 1024 * 1024)}}})
    headers = {**ACCEPT, "Authorization": f"Bearer {user_token}", "Mcp-Protocol-Version": "2025-11-25"}
    answer = httpx.post(f"{live_asgi}/mcp", content=body, headers=headers, timeout=30)
    assert answer.status_code == 413


def _jsonrpc_payload(answer: httpx.Response) -> dict:
    if answer.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[6:] for line in answer.text.splitlines() if line.startswith("data: ")]
        return json.loads(data[-1])
    return answer.json()


# --- two workers, one Redis: stateless serving answers on either ------------------------------------

class _Alternating(httpx2.AsyncBaseTransport):
    """Sends each request to the next worker in turn: initialize on A, the next POST on B …"""

    def __init__(self, bases: list[str]) -> None:
        self.ports = [httpx2.URL(base).port for base in bases]
        self.next = 0
        self.inner = httpx2.AsyncHTTPTransport()
        self.served: list[int] = []

    async def handle_async_request(self, request):
        port = self.ports[self.next % len(self.ports)]
        self.next += 1
        self.served.append(port)
        request.url = request.url.copy_with(port=port)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _worker_rows(database_url: str, conversation_id: str) -> list[tuple]:
    from testkit.fixtures.workers import worker_sql

    query = ("SELECT role, content FROM chat_app_message WHERE conversation_id = {} ORDER BY created_at, seq")
    return worker_sql(database_url, query, (uuid.UUID(conversation_id),))


async def test_two_workers_answer_the_same_client_request_by_request(workers, token, llm_server, worker_database):
    (a_url, _), (b_url, _) = workers
    llm_server.reply_text("A 或 B 都行。")
    llm_server.reply_text("还是同一个对话。")
    transport = _Alternating([a_url, b_url])
    async with httpx2.AsyncClient(transport=transport, headers=token, timeout=httpx2.Timeout(CALL_TIMEOUT)) as http:
        async with streamable_http_client(f"{a_url}/mcp", http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                assert [t.name for t in (await session.list_tools()).tools] == ["ask_xiaozhi"]
                first = await session.call_tool("ask_xiaozhi", {"message": "哪个进程？"})
                conversation_id = first.structured_content["conversation_id"]
                second = await session.call_tool("ask_xiaozhi", {"message": "再问", "conversation_id": conversation_id})
    assert set(transport.served) == set(transport.ports)  # both workers answered
    assert first.structured_content["answer"] == "A 或 B 都行。"
    assert second.structured_content["conversation_id"] == conversation_id
    rows = await sync_to_async(_worker_rows)(worker_database, conversation_id)
    assert [role for role, _ in rows] == ["user", "assistant", "user", "assistant"]


async def test_a_cancel_posted_to_the_other_worker_stops_the_run(workers, token, llm_server, worker_database):
    (a_url, _), (b_url, _) = workers
    release = threading.Event()
    llm_server.queue(Reply(text="在 A 上慢慢说，", hold_after_chunks=2, release=release))
    headers = {**ACCEPT, **token, "Mcp-Protocol-Version": "2025-11-25"}
    call = {"jsonrpc": "2.0", "id": "call-1", "method": "tools/call", "params": {
        "name": "ask_xiaozhi", "arguments": {"message": "说"}, "_meta": {"progressToken": "p1"}}}
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "call-1"}}
    try:
        async with httpx.AsyncClient(timeout=CALL_TIMEOUT) as http:
            async with http.stream("POST", f"{a_url}/mcp", json=call, headers=headers) as response:
                assert response.status_code == 200
                events, lines = [], response.aiter_lines()
                async for line in lines:
                    if line.startswith("data: "):
                        events.append(json.loads(line[6:]))
                        if events[-1].get("params", {}).get("message", "").startswith("正在回答"):
                            break
                answer = await http.post(f"{b_url}/mcp", json=cancel, headers=headers)
                assert answer.status_code == 202
                async for line in lines:
                    if line.startswith("data: "):
                        events.append(json.loads(line[6:]))
    finally:
        release.set()
    # The stopped run's end still reaches the call's stream (a client ignores an answer to a request
    # it cancelled): the reply so far, cut.
    assert events[-1]["id"] == "call-1" and events[-1]["result"]["isError"] is True
    assert events[-1]["result"]["content"][-1]["text"] == "校园小智没能回答：回答被中断了。"
    from testkit.fixtures.workers import worker_sql

    rows = await sync_to_async(worker_sql)(
        worker_database, "SELECT status FROM chat_app_run", ()
    )
    assert rows == [("interrupted",)]
