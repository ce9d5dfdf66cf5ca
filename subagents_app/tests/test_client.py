"""The sub-agent client against the real contract sub-agent on loopback (docs/design.md#sub-agents)."""
import socket
import time

import pytest

from campus_agent.base.errors import CAMPUS_TOKEN_EXPIRED, DOWNSTREAM, SUBAGENT_INTERNAL
from subagents_app.client import (
    CONNECT_FAILED_NOTICE,
    CONNECT_FAILED_TEXT,
    ERROR_EVENT_NOTICE,
    ERROR_EVENT_TEXT,
    HTTP_ERROR_NOTICE,
    HTTP_ERROR_TEXT,
    TIMEOUT_NOTICE,
    TIMEOUT_TEXT,
    TOKEN_EXPIRED_NOTICE,
    subagent_call,
    subagent_client_close,
)
from subagents_app.models import SubAgent
from testkit.subagents.contract_agent import (
    CHART,
    ERROR_MESSAGE,
    EXPIRED_MESSAGE,
    HUGE_CHUNK,
    answer_chunks,
)

pytestmark = pytest.mark.django_db

TOKEN = "campus-token-abcdefghijklmnop"


@pytest.fixture
async def call(sub_agent):
    """Calls the `canteen` sub-agent; returns (reply, chunks seen live, seconds taken)."""

    async def run(message: str, *, agent=None, token: str | None = TOKEN):
        seen: list[tuple[float, str]] = []

        async def on_chunk(text: str) -> None:
            seen.append((time.perf_counter(), text))

        started = time.perf_counter()
        reply = await subagent_call(
            sub_agent=agent or sub_agent, message=message, request_id="0123456789abcdef",
            conversation_id="conv-1", campus_token=token, on_chunk=on_chunk,
        )
        return reply, seen, time.perf_counter() - started

    yield run
    await subagent_client_close()


async def test_answer_streams_live_with_contract_headers_and_chart(call, subagent_server):
    reply, seen, _ = await call("今天吃啥")
    assert reply.ok and reply.text == "".join(answer_chunks("今天吃啥"))
    assert reply.chart == CHART
    assert [c for _, c in seen] == answer_chunks("今天吃啥")
    # Chunks are handed over as they arrive (paced 20 ms apart), not all at the end.
    assert seen[-1][0] - seen[0][0] >= 0.05
    sent = subagent_server.last_request
    assert sent.headers["authorization"] == f"Bearer {TOKEN}"
    assert sent.headers["x-request-id"] == "0123456789abcdef"
    assert sent.headers["x-parent-conversation-id"] == "conv-1"
    assert sent.headers["content-type"] == "application/json"
    assert sent.body == {"message": "今天吃啥", "domain": "canteen"}


async def test_no_authorization_header_without_a_campus_token(call, subagent_server):
    reply, _, _ = await call("你好", token=None)
    assert reply.ok
    assert "authorization" not in subagent_server.last_request.headers


@pytest.mark.parametrize("mode", ["quirky", "nonjson", "deep"])
async def test_parser_accepts_what_sse_allows_and_skips_undecodable_frames(call, mode):
    reply, seen, _ = await call(f"[[mode:{mode}]]今天吃啥")
    assert reply.ok, reply.text
    assert reply.text == "".join(answer_chunks("今天吃啥"))
    assert [c for _, c in seen] == answer_chunks("今天吃啥")
    assert reply.chart == CHART


def _variant(sub_agent, **fields) -> SubAgent:
    """An unsaved copy with other settings: the client only reads its fields."""
    values = {f: getattr(sub_agent, f) for f in ("name", "description", "base_url", "domain", "timeout_sec")}
    return SubAgent(**(values | fields))


async def test_sleep_past_timeout_maps_to_timeout_text_in_time(call, sub_agent):
    short = _variant(sub_agent, timeout_sec=1)
    reply, _, took = await call("[[mode:timeout]]", agent=short)
    assert (reply.ok, reply.text, reply.code) == (False, TIMEOUT_TEXT, DOWNSTREAM)
    assert reply.notice == TIMEOUT_NOTICE.format(label="食堂助手")
    assert took < 1 + 1


async def test_endless_trickle_still_ends_at_the_deadline(call, sub_agent):
    short = _variant(sub_agent, timeout_sec=1)
    reply, seen, took = await call("[[mode:trickle]]", agent=short)
    assert (reply.ok, reply.text) == (False, TIMEOUT_TEXT)
    assert seen  # the trickle was forwarded while it lasted
    assert took < 1 + 1


async def test_http_500_maps_to_status_text(call):
    reply, _, took = await call("[[mode:http500]]")
    assert (reply.ok, reply.text, reply.code) == (False, HTTP_ERROR_TEXT.format(status=500), SUBAGENT_INTERNAL)
    assert reply.notice == HTTP_ERROR_NOTICE.format(label="食堂助手")
    assert took < 3 + 1


async def test_error_event_maps_to_its_message(call):
    reply, _, _ = await call("[[mode:error]]")
    assert (reply.ok, reply.text, reply.code) == (False, ERROR_EVENT_TEXT.format(message=ERROR_MESSAGE), SUBAGENT_INTERNAL)
    assert reply.notice == ERROR_EVENT_NOTICE.format(label="食堂助手")


async def test_error_event_ends_the_call_even_when_no_done_follows(call, sub_agent):
    reply, _, took = await call("[[mode:error_hang]]")
    assert (reply.ok, reply.text) == (False, ERROR_EVENT_TEXT.format(message=ERROR_MESSAGE))
    assert took < sub_agent.timeout_sec  # not mistaken for a timeout


async def test_expired_campus_token_keeps_code_40102(call):
    reply, _, _ = await call("[[mode:expired]]")
    assert (reply.ok, reply.code) == (False, CAMPUS_TOKEN_EXPIRED)
    assert reply.text == ERROR_EVENT_TEXT.format(message=EXPIRED_MESSAGE)
    assert reply.notice == TOKEN_EXPIRED_NOTICE


@pytest.mark.parametrize(
    ("written", "code"),
    [
        ('"40102"', CAMPUS_TOKEN_EXPIRED),  # a string, as the seed's sub-agents send it
        ('" 40102 "', CAMPUS_TOKEN_EXPIRED),
        ("40102", CAMPUS_TOKEN_EXPIRED),
        ("40102.0", CAMPUS_TOKEN_EXPIRED),
        ('"50001"', SUBAGENT_INTERNAL),
        ("50003", SUBAGENT_INTERNAL),  # a sub-agent's own failure is 50001 whatever it calls it
        ('"4O1O2"', SUBAGENT_INTERNAL),
        ('"\uff14\uff10\uff11\uff10\uff12"', SUBAGENT_INTERNAL),  # full-width digits
        ('""', SUBAGENT_INTERNAL),
        ("null", SUBAGENT_INTERNAL),
        ("true", SUBAGENT_INTERNAL),
        ("[40102]", SUBAGENT_INTERNAL),
        ('{"code": 40102}', SUBAGENT_INTERNAL),
        ("1" * 4000, SUBAGENT_INTERNAL),
        ("1e999", SUBAGENT_INTERNAL),
    ],
)
async def test_error_code_as_number_or_string_and_garbage(call, written, code):
    reply, _, _ = await call(f"[[mode:coded]] {written}")
    assert (reply.ok, reply.code) == (False, code)
    assert reply.text == ERROR_EVENT_TEXT.format(message=ERROR_MESSAGE)
    assert reply.notice == (TOKEN_EXPIRED_NOTICE if code == CAMPUS_TOKEN_EXPIRED else
                            ERROR_EVENT_NOTICE.format(label="食堂助手"))


async def test_one_huge_chunk_is_taken_whole(call):
    reply, seen, _ = await call("[[mode:huge]]")
    assert reply.ok and reply.text == HUGE_CHUNK
    assert [c for _, c in seen] == [HUGE_CHUNK]


async def test_connection_cut_mid_stream_is_a_call_failure_without_retry(call, subagent_server):
    reply, seen, _ = await call("[[mode:drop]]")
    assert not reply.ok and reply.code == DOWNSTREAM
    assert reply.text.startswith(CONNECT_FAILED_TEXT.format(reason=""))
    assert reply.notice == CONNECT_FAILED_NOTICE.format(label="食堂助手")
    assert [c for _, c in seen] == ["说到一半"]
    assert len(subagent_server.requests) == 1  # no retry


async def test_connection_refused_names_the_reason(call, sub_agent):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    down = _variant(sub_agent, base_url=f"http://127.0.0.1:{port}", timeout_sec=2)
    reply, _, took = await call("你好", agent=down)
    prefix = CONNECT_FAILED_TEXT.format(reason="")
    assert not reply.ok and reply.text.startswith(prefix) and len(reply.text) > len(prefix)
    assert reply.notice == CONNECT_FAILED_NOTICE.format(label="食堂助手")  # no exception for the student
    assert took < 2 + 1
