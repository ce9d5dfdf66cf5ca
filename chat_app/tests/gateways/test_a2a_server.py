"""The campus agent as an A2A agent (docs/design.md#other-clients, chat_app/gateways/a2a_server.py), end to end: the real
ASGI app on loopback (`live_asgi`), a2a-sdk's own client, the scripted model and the contract
sub-agent. Hostile JSON-RPC goes over plain httpx."""
import asyncio
import threading
import uuid

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.helpers import get_artifact_text, get_message_text
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.constants import TransportProtocol
from a2a.utils.errors import ContentTypeNotSupportedError, TaskNotFoundError
from google.protobuf.json_format import MessageToDict

from agents_app.models import Agent
from campus_agent.base.errors import MSG_RATE_LIMITED
from chat_app.accounts.api_keys import api_key_create
from chat_app.gateways.a2a_server import (
    APPROVAL_TEXT,
    AUTH_REQUIRED_TEXT,
    CANCELED_TEXT,
    MSG_NOT_FOUND,
    MSG_TEXT_ONLY,
    TOOL_STATUS_TEXT,
)
from chat_app.models import Conversation, Run
from chat_app.models import Message as Row
from testkit.model.fake_llm import Reply

pytestmark = pytest.mark.django_db(transaction=True)

A2A_VERSION = {"A2A-Version": "1.0"}


@pytest.fixture
def api_key(user) -> str:
    return api_key_create(user=user, name="A2A 客户端")[1]


@pytest.fixture
def key_headers(api_key) -> dict:
    return {"Authorization": f"Bearer {api_key}"}


def _question(text: str, *, context_id: str = "", task_id: str = "", parts=None, metadata=None) -> SendMessageRequest:
    message = Message(role=Role.ROLE_USER, message_id=uuid.uuid4().hex, context_id=context_id, task_id=task_id,
                      parts=parts if parts is not None else [Part(text=text)])
    request = SendMessageRequest(message=message)
    if metadata:
        request.metadata.update(metadata)
    return request


async def _client(base: str, headers: dict, *, streaming: bool = True, polling: bool = False):
    http = httpx.AsyncClient(headers=headers, timeout=20)
    card = await A2ACardResolver(http, base).get_agent_card()
    config = ClientConfig(httpx_client=http, streaming=streaming, polling=polling,
                          supported_protocol_bindings=[TransportProtocol.JSONRPC])
    return http, ClientFactory(config).create(card)


def _send(base, headers, request, *, streaming=False, polling=False) -> list:
    """Every StreamResponse of one send."""

    async def go():
        http, client = await _client(base, headers, streaming=streaming, polling=polling)
        try:
            return [event async for event in client.send_message(request)]
        finally:
            await http.aclose()

    return asyncio.run(go())


def _call(base, headers, method: str, request):
    async def go():
        http, client = await _client(base, headers)
        try:
            return await getattr(client, method)(request)
        finally:
            await http.aclose()

    return asyncio.run(go())


def _rpc(base, headers, method: str, params, *, rpc_id=1) -> httpx.Response:
    return httpx.post(f"{base}/a2a/", json={"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params},
                      headers={**headers, **A2A_VERSION}, timeout=20)


def _status_text(status) -> str:
    return get_message_text(status.message) if status.HasField("message") else ""


# --- the card ----------------------------------------------------------------------------------

def test_card_names_the_endpoint_bearer_auth_streaming_and_one_skill_per_enabled_agent(live_asgi, agent,
                                                                                        agent_factory):
    agent_factory(slug="jiaowu", name="教务助手", is_default=False)
    agent_factory(slug="off", name="停用的", is_default=False, enabled=False)
    answer = httpx.get(f"{live_asgi}/.well-known/agent-card.json")
    assert answer.status_code == 200 and answer.headers["x-request-id"]
    card = answer.json()
    assert card["name"] == "校园小智" and card["description"]
    assert card["supportedInterfaces"][0] == {"url": f"{live_asgi}/a2a/", "protocolBinding": "JSONRPC",
                                              "protocolVersion": "1.0"}
    assert card["capabilities"]["streaming"] is True
    assert card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == "Bearer"
    assert card["securityRequirements"] == [{"schemes": {"bearer": {}}}]
    skills = {s["id"]: s for s in card["skills"]}
    assert list(skills) == ["xiaozhi", "jiaowu"]  # the default first; disabled agents left out
    assert "食堂助手" in skills["xiaozhi"]["description"] and skills["jiaowu"]["name"] == "教务助手"
    Agent.objects.filter(slug="jiaowu").update(enabled=False)  # staff disable it in admin
    again = httpx.get(f"{live_asgi}/.well-known/agent-card.json").json()
    assert [s["id"] for s in again["skills"]] == ["xiaozhi"]
    # The SDK reads it as a card it can call.
    parsed = asyncio.run(A2ACardResolver(httpx.AsyncClient(), live_asgi).get_agent_card())
    assert parsed.supported_interfaces[0].url == f"{live_asgi}/a2a/"


# --- send ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("credential", ["api_key", "jwt"])
def test_send_with_an_api_key_or_a_jwt_completes_with_the_answer_artifact(
    credential, live_asgi, llm_settings, agent, user, api_key, token_for
):
    llm_settings.reply_text("今天中午有红烧肉。")
    token = api_key if credential == "api_key" else token_for(user)

    (event,) = _send(live_asgi, {"Authorization": f"Bearer {token}"}, _question("今天中午吃啥"))

    task = event.task
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert [get_artifact_text(a) for a in task.artifacts] == ["今天中午有红烧肉。"]
    assert get_message_text(task.history[0]) == "今天中午吃啥"
    run = Run.objects.get(id=task.id)  # a task is a run, its context the conversation
    assert str(run.conversation_id) == task.context_id and run.user == user
    assert run.status == Run.Status.FINISHED
    rows = list(Row.objects.filter(conversation_id=task.context_id).values_list("role", "content"))
    assert rows == [("user", "今天中午吃啥"), ("assistant", "今天中午有红烧肉。")]


def test_streaming_sends_status_while_the_sub_agent_runs_then_artifact_chunks_then_completed(
    live_asgi, llm_settings, agent, key_headers, subagent_server
):
    llm_settings.reply_tool_calls(("call_canteen", {"message": "今天的菜单"}), text="我查一下。")
    llm_settings.reply_text("今天有红烧肉和青菜。")

    events = _send(live_asgi, key_headers, _question("食堂今天有什么"), streaming=True)

    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds[0] == "task" and events[0].task.status.state == TaskState.TASK_STATE_WORKING
    statuses = [e.status_update for e in events if e.HasField("status_update")]
    working = [_status_text(s.status) for s in statuses if s.status.state == TaskState.TASK_STATE_WORKING]
    assert working == [TOOL_STATUS_TEXT.format(label="食堂助手")]
    assert statuses[-1].status.state == TaskState.TASK_STATE_COMPLETED and kinds[-1] == "status_update"
    chunks = [e.artifact_update for e in events if e.HasField("artifact_update")]
    assert len(chunks) > 2 and chunks[0].append is False and all(c.append for c in chunks[1:])
    assert {c.artifact.artifact_id for c in chunks} == {"answer"}
    # The text before the tool and the text after it are two paragraphs, as on the page (issue 42).
    assert "".join(get_artifact_text(c.artifact) for c in chunks) == "我查一下。\n\n今天有红烧肉和青菜。"
    task_id = events[0].task.id
    stored = _get(live_asgi, key_headers, task_id)  # read back from the rows: the same text
    assert get_artifact_text(stored.artifacts[0]) == "我查一下。\n\n今天有红烧肉和青菜。"
    # The status came while the tool ran: after the first round's text, before the answer's.
    first_status = kinds.index("status_update")
    before = "".join(get_artifact_text(e.artifact_update.artifact) for e in events[:first_status]
                     if e.HasField("artifact_update"))
    assert before == "我查一下。"
    assert subagent_server.requests  # the sub-agent really ran


def test_the_answer_artifact_carries_its_implicit_label(live_asgi, llm_settings, agent, key_headers, settings):
    """GB 45438-2025 (docs/safety.md, "Labels"): the answer artifact's metadata holds `aigc` (sent,
    streamed, read back), and the streamed answer's last status update holds it complete."""
    settings.AIGC_CONTENT_PRODUCER = "示例大学"
    llm_settings.reply_text("今天中午有红烧肉。")
    (event,) = _send(live_asgi, key_headers, _question("今天中午吃啥"))
    run = Run.objects.get(id=event.task.id)
    expected = {"Label": "1", "ContentProducer": "示例大学", "ProduceID": str(run.message_id),
                "ReservedCode1": "", "ContentPropagator": "", "PropagateID": "", "ReservedCode2": "",
                "provider": "default", "model": "fake-model"}
    assert MessageToDict(event.task.artifacts[0].metadata) == {"aigc": expected}
    assert MessageToDict(_get(live_asgi, key_headers, event.task.id).artifacts[0].metadata) == {"aigc": expected}

    llm_settings.reply_text("晚上有面条。")
    events = _send(live_asgi, key_headers, _question("晚上呢"), streaming=True)
    streamed = Run.objects.get(id=events[0].task.id)
    chunks = [e.artifact_update for e in events if e.HasField("artifact_update")]
    assert chunks and all(MessageToDict(c.artifact.metadata)["aigc"]["ProduceID"] == str(streamed.message_id)
                          for c in chunks)
    last = events[-1].status_update
    assert last.status.state == TaskState.TASK_STATE_COMPLETED
    assert MessageToDict(last.metadata) == {"aigc": {**expected, "ProduceID": str(streamed.message_id)}}


def test_a_blocking_send_keeps_the_paragraph_around_a_tool_call(live_asgi, llm_settings, agent, key_headers,
                                                                 subagent_server):
    llm_settings.reply_tool_calls(("call_canteen", {"message": "今天的菜单"}), text="好的，我查一下。")
    llm_settings.reply_text("今天食堂有红烧肉。")
    (event,) = _send(live_asgi, key_headers, _question("食堂今天有什么"))
    assert [get_artifact_text(a) for a in event.task.artifacts] == ["好的，我查一下。\n\n今天食堂有红烧肉。"]


def test_context_id_continues_the_conversation(live_asgi, llm_settings, agent, key_headers):
    llm_settings.reply_text("你好，我是小智。")
    (first,) = _send(live_asgi, key_headers, _question("你好"))
    llm_settings.reply_text("你刚才说了你好。")

    (second,) = _send(live_asgi, key_headers, _question("我刚才说了什么", context_id=first.task.context_id))

    assert second.task.context_id == first.task.context_id and second.task.id != first.task.id
    assert get_artifact_text(second.task.artifacts[0]) == "你刚才说了你好。"
    assert Conversation.objects.count() == 1
    rows = list(Row.objects.filter(conversation_id=first.task.context_id).values_list("role", "content"))
    assert rows == [("user", "你好"), ("assistant", "你好，我是小智。"), ("user", "我刚才说了什么"),
                    ("assistant", "你刚才说了你好。")]
    history = [(m["role"], m["content"]) for m in llm_settings.last_request.messages[1:]]
    assert history == rows[:3]  # the model saw the earlier turn


def test_metadata_agent_selects_another_agent(live_asgi, llm_settings, agent, agent_factory, key_headers):
    agent_factory(slug="jiaowu", name="教务助手", is_default=False, system_prompt="你是教务助手。")
    llm_settings.reply_text("选课在下周一开始。")
    (event,) = _send(live_asgi, key_headers, _question("什么时候选课", metadata={"agent": "jiaowu"}))
    assert event.task.status.state == TaskState.TASK_STATE_COMPLETED
    assert llm_settings.last_request.messages[0]["content"].startswith("你是教务助手。")


# --- get, cancel ----------------------------------------------------------------------------------

def test_get_task_of_a_running_then_a_finished_task(live_asgi, llm_settings, agent, key_headers):
    release = threading.Event()
    llm_settings.queue(Reply(text="先说一半，再说另一半。", hold_after_chunks=2, release=release))

    (started,) = _send(live_asgi, key_headers, _question("慢慢说"), polling=True)  # return_immediately
    task_id = started.task.id
    assert started.task.status.state == TaskState.TASK_STATE_WORKING
    try:
        running = _wait_for(lambda: _get(live_asgi, key_headers, task_id),
                            lambda t: t.artifacts and get_artifact_text(t.artifacts[0]) == "先说一半")
        assert running.status.state == TaskState.TASK_STATE_WORKING
        assert get_message_text(running.history[0]) == "慢慢说"
    finally:
        release.set()
    done = _wait_for(lambda: _get(live_asgi, key_headers, task_id),
                     lambda t: t.status.state == TaskState.TASK_STATE_COMPLETED)
    assert get_artifact_text(done.artifacts[0]) == "先说一半，再说另一半。"


def _get(base, headers, task_id):
    return _call(base, headers, "get_task", GetTaskRequest(id=task_id))


def _wait_for(read, ok, timeout: float = 10.0):
    """Reads until `ok(value)`: the run goes on in the server, the client polls as an A2A client would."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if ok(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"never reached: {value}")
        time.sleep(0.05)


def test_subscribe_to_a_running_task_rebuilds_the_answer_then_follows_it_to_the_end(live_asgi, llm_settings, agent,
                                                                                   key_headers):
    release = threading.Event()
    llm_settings.queue(Reply(text="订阅的人也能看到整段回答。", hold_after_chunks=2, release=release))
    (started,) = _send(live_asgi, key_headers, _question("慢慢说"), polling=True)

    async def go():
        http, client = await _client(live_asgi, key_headers)
        try:
            seen = []
            async for event in client.subscribe(SubscribeToTaskRequest(id=started.task.id)):
                seen.append(event)
                if event.HasField("artifact_update"):
                    release.set()  # what was said before it subscribed came first
            return seen
        finally:
            release.set()
            await http.aclose()

    events = asyncio.run(go())
    assert events[0].task.id == started.task.id
    text = "".join(get_artifact_text(e.artifact_update.artifact) for e in events if e.HasField("artifact_update"))
    assert text == "订阅的人也能看到整段回答。"
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED


def test_a_streaming_client_that_goes_away_does_not_stop_the_task(live_asgi, llm_settings, agent, key_headers):
    release = threading.Event()
    llm_settings.queue(Reply(text="走了也会说完。", hold_after_chunks=2, release=release))

    async def go():
        http, client = await _client(live_asgi, key_headers)
        try:
            events = client.send_message(_question("说完"))
            first = await anext(events)
            await events.aclose()  # the client hangs up
            return first.task.id
        finally:
            await http.aclose()

    task_id = asyncio.run(go())
    release.set()
    done = _wait_for(lambda: _get(live_asgi, key_headers, task_id),
                     lambda t: t.status.state == TaskState.TASK_STATE_COMPLETED)
    assert get_artifact_text(done.artifacts[0]) == "走了也会说完。"


def test_cancel_mid_answer_stops_the_run_and_stores_the_reply_interrupted(live_asgi, llm_settings, agent,
                                                                          key_headers):
    release = threading.Event()
    llm_settings.queue(Reply(text="这个回答会被取消掉的。", hold_after_chunks=3, release=release))

    async def go():
        http, client = await _client(live_asgi, key_headers)
        try:
            events = client.send_message(_question("说点什么"))
            seen, text = [], ""
            async for event in events:
                seen.append(event)
                if event.HasField("artifact_update"):
                    text += get_artifact_text(event.artifact_update.artifact)
                if text == "这个回答会被取消":
                    break  # two chunks in: the model is held
            canceled = await client.cancel_task(CancelTaskRequest(id=seen[0].task.id))
            await events.aclose()
            return seen, canceled
        finally:
            release.set()
            await http.aclose()

    seen, canceled = asyncio.run(go())
    assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    assert _status_text(canceled.status) == CANCELED_TEXT
    assert get_artifact_text(canceled.artifacts[0]) == "这个回答会被取消"
    run = Run.objects.get(id=canceled.id)
    assert run.status == Run.Status.INTERRUPTED
    reply = Row.objects.get(id=run.message_id)
    assert reply.content == "这个回答会被取消" and reply.meta["interrupted"] is True
    again = _rpc(live_asgi, key_headers, "CancelTask", {"id": canceled.id}).json()
    assert again["error"]["code"] == -32002  # TaskNotCancelable: it has ended


# --- not the caller's, no auth ------------------------------------------------------------------------

def test_another_users_task_or_context_is_not_found(live_asgi, llm_settings, agent, key_headers, other_user):
    llm_settings.reply_text("这是别人的回答。")
    other_key = api_key_create(user=other_user, name="别人")[1]
    (theirs,) = _send(live_asgi, {"Authorization": f"Bearer {other_key}"}, _question("我的问题"))

    for method, request in [("get_task", GetTaskRequest(id=theirs.task.id)),
                            ("cancel_task", CancelTaskRequest(id=theirs.task.id)),
                            ("get_task", GetTaskRequest(id=str(uuid.uuid4())))]:
        with pytest.raises(TaskNotFoundError):
            _call(live_asgi, key_headers, method, request)
    with pytest.raises(TaskNotFoundError) as raised:
        _send(live_asgi, key_headers, _question("接着说", context_id=theirs.task.context_id))
    assert str(MSG_NOT_FOUND) in str(raised.value)
    with pytest.raises(TaskNotFoundError):
        _send(live_asgi, key_headers, _question("接着说", task_id=theirs.task.id))
    assert Row.objects.filter(conversation_id=theirs.task.context_id).count() == 2  # nothing added


@pytest.mark.parametrize("authorization", [None, "Bearer nope", "Bearer cak_wrong", "Basic abc"])
def test_no_valid_bearer_is_401(live_asgi, agent, authorization):
    headers = {"Authorization": authorization} if authorization else {}
    answer = _rpc(live_asgi, headers, "GetTask", {"id": str(uuid.uuid4())})
    assert answer.status_code == 401 and answer.headers["x-request-id"]
    assert answer.json()["code"] == 40101 and answer.headers["www-authenticate"] == "Bearer"


# --- decisions: approvals, campus token, limits, parts ---------------------------------------------

def test_an_ask_first_tool_makes_the_task_input_required(live_asgi, llm_settings, agent, key_headers):
    from subagents_app.models import SubAgent

    SubAgent.objects.filter(name="canteen").update(approval_policy="ask")
    llm_settings.reply_tool_calls(("call_canteen", {"message": "帮我订饭"}))

    events = _send(live_asgi, key_headers, _question("帮我订一份饭"), streaming=True)

    last = events[-1].status_update.status
    assert last.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert _status_text(last).startswith(APPROVAL_TEXT.split("（")[0].format(tools="「食堂助手」"))
    task = _get(live_asgi, key_headers, events[0].task.id)
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert Run.objects.get(id=task.id).status == Run.Status.WAITING


def test_an_expired_campus_token_makes_the_task_auth_required(live_asgi, llm_settings, agent, key_headers,
                                                              subagent_server):
    llm_settings.reply_tool_calls(("call_canteen", {"message": "[[mode:expired]] 我的饭卡"}))
    llm_settings.reply_text("校园登录过期了。")
    (event,) = _send(live_asgi, key_headers, _question("我的饭卡余额"))
    assert event.task.status.state == TaskState.TASK_STATE_AUTH_REQUIRED
    assert _status_text(event.task.status) == AUTH_REQUIRED_TEXT
    assert get_artifact_text(event.task.artifacts[0]) == "校园登录过期了。"


def test_a_rate_limit_is_a_rejected_task_with_the_chinese_message(live_asgi, llm_settings, agent, key_headers,
                                                                   settings):
    settings.CHAT_RATE_PER_MINUTE = 1
    llm_settings.reply_text("第一条。")
    _send(live_asgi, key_headers, _question("第一条"))

    (event,) = _send(live_asgi, key_headers, _question("第二条"))

    assert event.task.status.state == TaskState.TASK_STATE_REJECTED
    assert _status_text(event.task.status) == MSG_RATE_LIMITED
    assert event.task.metadata["code"] == 42902 and event.task.metadata["retry_after_sec"] == 60
    assert Row.objects.filter(content="第二条").count() == 0


def test_file_parts_are_refused_clearly(live_asgi, agent, key_headers):
    with pytest.raises(ContentTypeNotSupportedError) as raised:
        _send(live_asgi, key_headers, _question("", parts=[Part(url="https://example.com/a.pdf",
                                                                  media_type="application/pdf")]))
    assert str(MSG_TEXT_ONLY) in str(raised.value)


# --- hostile JSON-RPC -----------------------------------------------------------------------------

@pytest.mark.parametrize(("body", "code"), [
    (b"{this is not json", -32700),
    (b"\xff\xfe garbage", -32700),
    (b"[" * 5000, -32700),
    (b'"just a string"', -32700),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "NoSuchMethod", "params": {}}', -32601),
    (b'{"jsonrpc": "2.0", "id": 1, "method": 42}', -32600),
    (b'{"jsonrpc": "1.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}', -32600),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": ["x"]}}', -32602),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": "hi"}}', -32602),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {"parts": []}}}', -32602),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {"messageId": "m", '
     b'"role": "ROLE_USER", "parts": [{"text": ""}]}}}', -32602),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {"messageId": "m", '
     b'"role": "ROLE_USER", "parts": [{"text": "hi"}], "contextId": "not-a-uuid"}}}', -32001),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}', -32004),
])
def test_hostile_json_rpc_gets_json_rpc_errors_never_a_5xx(live_asgi, agent, key_headers, body, code):
    answer = httpx.post(f"{live_asgi}/a2a/", content=body, timeout=20,
                        headers={**key_headers, **A2A_VERSION, "Content-Type": "application/json"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["error"]["code"] == code, answer.text


BAD_PARAMS = [
    b'{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": ["x"]}}',
    b'{"jsonrpc": "2.0", "id": 2, "method": "SendMessage", "params": {"message": "hi"}}',
    b'{"jsonrpc": "2.0", "id": 3, "method": 42}',
    b'{"jsonrpc": "2.0", "id": 4, "method": "CancelTask", "params": {"id": {"x": 1}}}',
]


def test_a_clients_malformed_json_rpc_is_not_logged_as_our_error(live_asgi, agent, key_headers):
    """Issue 42: a2a-sdk logged each malformed request as an ERROR with its traceback. A client's
    mistake is answered with its JSON-RPC error (unchanged) and logged as one line, no traceback."""
    from loguru import logger

    records = []
    sink = logger.add(lambda message: records.append(message.record), level="DEBUG", format="{message}")
    try:
        for body in BAD_PARAMS:
            answer = httpx.post(f"{live_asgi}/a2a/", content=body, timeout=20,
                                headers={**key_headers, **A2A_VERSION, "Content-Type": "application/json"})
            assert answer.status_code == 200 and answer.json()["error"]["code"] in (-32600, -32602), answer.text
    finally:
        logger.remove(sink)
    sdk = [r for r in records if r["name"].startswith("a2a.")]
    assert sdk, "the SDK's lines are expected, as one-liners"
    assert all(r["level"].no < logger.level("ERROR").no for r in sdk), [(r["level"].name, r["message"]) for r in sdk]
    assert all(r["exception"] is None for r in sdk)
    assert any("Failed to parse request params" in r["message"] and "list" in r["message"] for r in sdk)


def test_a_huge_body_or_message_is_refused(live_asgi, agent, key_headers):
    huge = httpx.post(f"{live_asgi}/a2a/", content=b'{"x": "' + b"a" * 200_000 + b'"}', timeout=20,
                      headers={**key_headers, **A2A_VERSION, "Content-Type": "application/json"})
    # Refused before it is read, in front of the JSON-RPC app (campus_agent/intake.py): an HTTP 413.
    assert huge.status_code == 413 and huge.json() == {"code": 41301, "message": "请求体过大（上限 64 KB）。"}
    long = _rpc(live_asgi, key_headers, "SendMessage", {"message": {
        "messageId": "m", "role": "ROLE_USER", "parts": [{"text": "长" * 8001}]}})
    assert long.json()["error"]["code"] == -32602 and "8000" in long.json()["error"]["message"]
    assert Row.objects.count() == 0
    not_post = httpx.get(f"{live_asgi}/a2a/", headers=key_headers)
    assert not_post.status_code == 405


# --- several workers --------------------------------------------------------------------------------

def test_a_task_started_on_worker_a_is_read_and_cancelled_on_worker_b(workers, token, llm_server, worker_database):
    from testkit.fixtures.workers import worker_sql

    (a_url, _), (b_url, _) = workers
    release = threading.Event()
    llm_server.queue(Reply(text="两个进程共享同一个任务。", hold_after_chunks=2, release=release))
    try:
        (started,) = _send(a_url, token, _question("慢慢说"), polling=True)
        task_id = started.task.id
        running = _wait_for(lambda: _get(b_url, token, task_id),
                            lambda t: t.artifacts and get_artifact_text(t.artifacts[0]) == "两个进程")
        assert running.status.state == TaskState.TASK_STATE_WORKING  # B follows A's run over Redis
        assert get_message_text(running.history[0]) == "慢慢说"

        canceled = _call(b_url, token, "cancel_task", CancelTaskRequest(id=task_id))
    finally:
        release.set()
    assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    assert get_artifact_text(canceled.artifacts[0]) == "两个进程"
    rows = worker_sql(worker_database, "SELECT status FROM chat_app_run WHERE id = {}", (uuid.UUID(task_id),))
    assert rows == [("interrupted",)]
    again = _get(a_url, token, task_id)  # A says the same from the rows
    assert again.status.state == TaskState.TASK_STATE_CANCELED
    assert get_artifact_text(again.artifacts[0]) == "两个进程"
