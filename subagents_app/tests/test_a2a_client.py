"""The A2A sub-agent client against a real a2a-sdk server on loopback (a2a_agent.py)."""
import asyncio

import pytest
from asgiref.sync import sync_to_async

from campus_agent.base.errors import DOWNSTREAM, SUBAGENT_INTERNAL
from subagents_app.a2a_card import FOREIGN_URL_TEXT, NOT_JSON_TEXT, TOO_LARGE_TEXT
from subagents_app.a2a_client import (
    AUTH_REQUIRED_NOTICE,
    AUTH_REQUIRED_TEXT,
    CUT_REASON,
    INPUT_REQUIRED_TEXT,
    a2a_call,
    a2a_client_close,
)
from subagents_app.client import (
    CONNECT_FAILED_NOTICE,
    CONNECT_FAILED_TEXT,
    ERROR_EVENT_NOTICE,
    ERROR_EVENT_TEXT,
    HTTP_ERROR_TEXT,
    TIMEOUT_TEXT,
)
from testkit.subagents.a2a_agent import (
    AGENT_CANCELED_MESSAGE,
    AUTH_DETAIL,
    CUT_CHUNK,
    FAILED_MESSAGE,
    INPUT_QUESTION,
    RPC_ERROR_MESSAGE,
    STATUS_TEXT,
    answer_chunks,
)

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "campus-token-abcdefghijklmnop"
LABEL = "图书馆助手"


@pytest.fixture
async def call(a2a_sub_agent_factory):
    """Calls an A2A sub-agent of the given variant; returns (reply, the chunks streamed live)."""

    async def run(message: str, variant: str = "stream", *, token: str | None = TOKEN, **fields):
        # sync_to_async's one thread: a thread of its own would keep a pooled connection for good.
        row = await sync_to_async(a2a_sub_agent_factory)(variant, display_name=LABEL, **fields)
        seen: list[str] = []

        async def on_chunk(text: str) -> None:
            seen.append(text)

        reply = await a2a_call(sub_agent=row, message=message, request_id="0123456789abcdef",
                               conversation_id="conv-1", campus_token=token, on_chunk=on_chunk)
        return reply, seen

    yield run
    await a2a_client_close()


async def test_streamed_answer_status_and_artifact_chunks_live(call, a2a_server):
    reply, seen = await call("图书馆几点关门", domain="library")
    assert reply.ok and reply.text == "".join(answer_chunks("图书馆几点关门"))
    assert seen == [STATUS_TEXT + "\n", *answer_chunks("图书馆几点关门")]
    assert a2a_server.messages == ["图书馆几点关门"] and a2a_server.metadata == [{"domain": "library"}]
    (rpc,) = a2a_server.rpc_requests("stream")
    assert rpc.headers["x-request-id"] == "0123456789abcdef"
    assert rpc.headers["x-parent-conversation-id"] == "conv-1"
    assert "text/event-stream" in rpc.headers["accept"]  # the streaming send
    # The card declares no auth: the campus token stays in the gateway.
    assert all("authorization" not in r.headers for r in a2a_server.requests)


async def test_card_without_streaming_gets_a_plain_send(call, a2a_server):
    reply, seen = await call("图书馆几点开门", "plain")
    assert reply.ok and reply.text == "".join(answer_chunks("图书馆几点开门"))
    assert seen == [reply.text]  # the whole answer once, as it came
    (rpc,) = a2a_server.rpc_requests("plain")
    assert "text/event-stream" not in rpc.headers.get("accept", "")


async def test_campus_token_only_when_the_card_declares_bearer_auth(call, a2a_server):
    reply, _ = await call("周末开吗", "bearer")
    assert reply.ok
    (rpc,) = a2a_server.rpc_requests("bearer")
    assert rpc.headers["authorization"] == f"Bearer {TOKEN}"
    card_fetch = [r for r in a2a_server.requests if r.path.endswith("agent-card.json")]
    assert card_fetch and all("authorization" not in r.headers for r in card_fetch)


async def test_agent_answering_with_a_message(call):
    reply, seen = await call("[[mode:message]] 你好")
    assert reply.ok and reply.text == "".join(answer_chunks("你好")) and seen == [reply.text]


async def test_failed_task_is_the_error_event_text(call):
    reply, _ = await call("[[mode:failed]] 查馆藏")
    assert not reply.ok and reply.text == ERROR_EVENT_TEXT.format(message=FAILED_MESSAGE)
    assert reply.code == SUBAGENT_INTERNAL and reply.notice == ERROR_EVENT_NOTICE.format(label=LABEL)
    assert not reply.source_failed  # it answered: the breaker does not count it


async def test_task_the_agent_cancelled(call):
    reply, _ = await call("[[mode:canceled]] 查馆藏")
    assert not reply.ok and reply.text == ERROR_EVENT_TEXT.format(message=AGENT_CANCELED_MESSAGE)


async def test_input_required_ends_the_call_with_the_question_for_the_model(call):
    reply, _ = await call("[[mode:input]] 图书馆几点开门")
    assert reply.ok and reply.text == INPUT_REQUIRED_TEXT.format(question=INPUT_QUESTION)


async def test_auth_required_ends_the_call_clearly(call):
    reply, _ = await call("[[mode:auth]] 我的借阅")
    assert not reply.ok and reply.text == AUTH_REQUIRED_TEXT.format(detail=AUTH_DETAIL)
    assert reply.notice == AUTH_REQUIRED_NOTICE.format(label=LABEL) and reply.code is None
    assert not reply.source_failed


async def test_timeout_is_the_seed_text_and_cancels_the_task(call, a2a_server):
    reply, seen = await call("[[mode:hang]] 慢慢查", timeout_sec=1)
    assert (reply.ok, reply.text, reply.code) == (False, TIMEOUT_TEXT, DOWNSTREAM)
    assert seen[:2] == [STATUS_TEXT + "\n", answer_chunks("")[0]]
    # The agent sees tasks/cancel for the task the call gave up on.
    assert await asyncio.to_thread(a2a_server.cancelled.wait, 5)
    assert len(a2a_server.cancelled_tasks) == 1


async def test_cancelling_the_call_cancels_the_a2a_task(call, a2a_sub_agent_factory, a2a_server):
    first_chunk = asyncio.Event()

    async def on_chunk(text: str) -> None:
        if text == answer_chunks("")[0]:
            first_chunk.set()

    row = await sync_to_async(a2a_sub_agent_factory)("stream", timeout_sec=30)
    running = asyncio.create_task(a2a_call(sub_agent=row, message="[[mode:hang]] 一直查", request_id="0123456789abcdef",
                                           conversation_id="conv-1", campus_token=None, on_chunk=on_chunk))
    await asyncio.wait_for(first_chunk.wait(), 5)  # the task exists on the agent and is working
    running.cancel()  # what a stop does to the tool's asyncio task
    with pytest.raises(asyncio.CancelledError):
        await running
    assert await asyncio.to_thread(a2a_server.cancelled.wait, 5)
    assert len(a2a_server.cancelled_tasks) == 1


async def test_garbage_stream_is_a_connection_failure(call):
    reply, _ = await call("你好", "garbage")
    assert not reply.ok and reply.text.startswith(CONNECT_FAILED_TEXT.format(reason=""))
    assert reply.code == DOWNSTREAM and reply.notice == CONNECT_FAILED_NOTICE.format(label=LABEL)


async def test_agent_dying_mid_stream_is_a_connection_failure(call):
    reply, seen = await call("你好", "die")
    assert seen == [CUT_CHUNK]
    assert not reply.ok and reply.text.startswith(CONNECT_FAILED_TEXT.format(reason=""))
    assert reply.code == DOWNSTREAM and reply.source_failed


async def test_stream_ending_before_the_task_is_a_connection_failure(call):
    reply, _ = await call("你好", "short")
    assert (reply.ok, reply.text, reply.code) == (False, CONNECT_FAILED_TEXT.format(reason=CUT_REASON), DOWNSTREAM)


async def test_http_status_of_the_json_rpc_endpoint(call):
    reply, _ = await call("你好", "http500")
    assert (reply.ok, reply.text, reply.status) == (False, HTTP_ERROR_TEXT.format(status=500), 500)
    assert reply.source_failed


async def test_json_rpc_error_is_the_error_event_text(call):
    reply, _ = await call("你好", "rpcerror")
    assert (reply.ok, reply.text, reply.code) == (False, ERROR_EVENT_TEXT.format(message=RPC_ERROR_MESSAGE),
                                                  SUBAGENT_INTERNAL)
    assert not reply.source_failed


async def test_card_failures(call):
    for variant, expected in (
        ("nocard", HTTP_ERROR_TEXT.format(status=404)),
        ("notjson", CONNECT_FAILED_TEXT.format(reason=NOT_JSON_TEXT)),
        ("huge", CONNECT_FAILED_TEXT.format(reason=TOO_LARGE_TEXT)),
        ("foreign", CONNECT_FAILED_TEXT.format(reason=FOREIGN_URL_TEXT.format(url="http://127.0.0.2:9/rpc"))),
    ):
        reply, _ = await call("你好", variant, name=f"lib-{variant}")
        assert (reply.ok, reply.text) == (False, expected), variant
    reply, _ = await call("你好", "odd", name="lib-odd")
    assert not reply.ok and "Agent Card 的内容不符合 A2A 规范" in reply.text


async def test_unreachable_agent(call):
    reply, _ = await call("你好", base_url="http://127.0.0.1:9")
    assert not reply.ok and reply.code == DOWNSTREAM and reply.text.startswith("调用子 Agent 失败: ")
