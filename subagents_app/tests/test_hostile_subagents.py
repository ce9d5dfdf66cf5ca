"""Hostile sub-agents (issue 20, point 1): real servers on loopback send what no sub-agent should —
50 MB of chunks, one 30 MB line, 100,000 frames, bytes that are not UTF-8, CR-only line ends,
NUL, terminal escapes, a 5,000-digit error code, error frames made of objects — over the seed
contract (contract_agent.py) and A2A (a2a_agent.py).

Every case asserts: the call ends with the right reply (what the tool hands the model), the
student was streamed the same text (the cut marker included), memory stayed bounded (tracemalloc
peak, server and client together, in this process) and the event loop was never held (a ticker
task's longest gap, less its thread's waits for a core: testkit/loop_stall.py). The model's side
and the full stack (no 5xx, the turn stored) are checked end to end at the bottom.
"""
from __future__ import annotations

import asyncio
import gc
import json
import tracemalloc
from dataclasses import dataclass, field

import pytest
from asgiref.sync import sync_to_async

from agents_app.runtime.context import RunContext
from agents_app.runtime.events import ToolChunk, ToolResult
from agents_app.runtime.turn import turn_stream
from campus_agent.base.errors import CAMPUS_TOKEN_EXPIRED, SUBAGENT_INTERNAL
from chat_app.accounts.sessions import auth_session_create
from chat_app.models import AuthSession, Message
from subagents_app.a2a_client import a2a_call, a2a_client_close
from subagents_app.client import (
    CONNECT_FAILED_TEXT,
    EMPTY_ANSWER_TEXT,
    ERROR_EVENT_TEXT,
    ERROR_MESSAGE_MAX_CHARS,
    HTTP_ERROR_TEXT,
    NOT_SSE_REASON,
    subagent_call,
    subagent_client_close,
)
from subagents_app.limits import CUT_BYTES, CUT_EVENTS, CUT_FRAMES, CUT_LINE, CUT_TEXT, size_text
from testkit.loop_stall import loop_held_ticker
from testkit.subagents.a2a_agent import (
    artifact_update,
    rpc_frame,
    status_update,
)
from testkit.subagents.contract_agent import (
    ERROR_MESSAGE,
    FLOOD_PIECE,
    HUGE_CHUNK,
    MANY_FRAMES_TEXT,
    answer_chunks,
)
from testkit.web.sse import chat

MB = 1024 * 1024
CUT_HEAD = "[子 Agent 的回答已截断："
# Far below what the hostile answers send (50 MB, 30 MB …), above what the caps let a call hold
# (4 MB of bytes, held once as bytes and as text) plus the servers' own pieces.
MEMORY_PEAK_MAX = 40 * MB
# A held loop stalls for seconds; the time the loop's thread waits for a core is not counted
# (testkit/loop_stall.py), so these run beside the suite's other tests.
LOOP_GAP_MAX_SEC = 0.5


def sse(payload) -> str:
    return "data: " + (payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)) + "\n\n"


def chunk(text: str) -> str:
    return sse({"type": "chunk", "content": text})


def done(text: str | None = None, **extra) -> str:
    payload = {"type": "done", **extra}
    if text is not None:
        payload["full_text"] = text
    return sse(payload)


SESSION = sse({"type": "session", "session_id": "s"})


def line_cut(limit: str) -> str:
    """The head of a line cap's reason: how much of the line was dropped depends on how the bytes
    came over the socket."""
    return CUT_LINE.format(limit=limit, dropped="").partition("（")[0]


@dataclass
class Expect:
    """What the call must end with. kind: ok (text exact), cut (text starts with `text`, then the
    marker naming `reason`), error (code + text), failed (text starts with it)."""

    kind: str
    text: str = ""
    reason: str = ""
    code: int | None = None
    chart: object = None


@dataclass
class Case:
    id: str
    message: str  # what is asked (a `[[mode:…]]` marker), or a raw body key
    expect: Expect
    raw: object = None  # the raw answer for `[[mode:raw]] <id>`
    media: str | None = None  # its Content-Type
    caps: dict = field(default_factory=dict)  # settings overridden for the case
    streamed_whole: bool = True  # what the student was streamed is exactly the answer


def raw_case(id_: str, raw, expect: Expect, **extra) -> Case:
    return Case(id=id_, message=f"[[mode:raw]] {id_}", expect=expect, raw=raw, **extra)


OK = "好的。"
NORMAL = "".join(answer_chunks("今天吃啥"))

SSE_CASES = [
    # caps at their defaults, against answers far past them
    Case("flood-50mb", "[[mode:flood]]",
         Expect("cut", lambda kept: kept.startswith(FLOOD_PIECE) and set(kept) == {"洪"}, CUT_BYTES.format(limit="4 MB"))),
    Case("long-line-30mb", "[[mode:longline]]",
         Expect("cut", "前面的话。", line_cut("2 MB"))),
    Case("many-frames-100k", "[[mode:manyframes]]",
         Expect("cut", MANY_FRAMES_TEXT * 9_999, CUT_FRAMES.format(limit="10,000"))),  # the session is one
    Case("one-1mb-chunk-fits", "[[mode:huge]]", Expect("ok", HUGE_CHUNK)),
    # caps set low, against ordinary answers
    Case("bytes-cap", "今天吃啥", Expect("cut", lambda kept: kept and NORMAL.startswith(kept),
                                      CUT_BYTES.format(limit="400 字节")), caps={"SUBAGENT_STREAM_MAX_BYTES": 400}),
    Case("frames-cap", "今天吃啥", Expect("cut", "子Agent已收到：", CUT_FRAMES.format(limit="5")),
         caps={"SUBAGENT_STREAM_MAX_FRAMES": 5}),
    raw_case("line-cap", [SESSION, chunk("开头"), chunk("很长" * 3000), done("x")],
             Expect("cut", "开头", line_cut("4 KB")),
             caps={"SUBAGENT_SSE_LINE_MAX_BYTES": 4096}),
    raw_case("endless-data-lines", [SESSION, chunk("开头")] + ["data: " + "x" * 1000 + "\n"] * 200,
             Expect("cut", "开头", line_cut("64 KB")),
             caps={"SUBAGENT_SSE_LINE_MAX_BYTES": 64 * 1024}),
    raw_case("no-line-end-at-all", ["x" * 65536] * 80, Expect("cut", "", line_cut("2 MB"))),
    raw_case("endless-comments", [SESSION, chunk("开头")] + [": keep-alive\n" * 5000] * 100,
             Expect("cut", "开头", CUT_BYTES.format(limit="256 KB")), caps={"SUBAGENT_STREAM_MAX_BYTES": 256 * 1024}),
    raw_case("endless-blank-lines", ["\n" * 65536] * 100, Expect("cut", "", CUT_BYTES.format(limit="1 MB")),
             caps={"SUBAGENT_STREAM_MAX_BYTES": MB}),
    raw_case("frames-that-are-not-json", ["data: {nope\n\n" * 1000] * 20,
             Expect("cut", "", CUT_FRAMES.format(limit="10,000"))),
    # line ends and encodings the SSE standard allows (or a broken peer sends)
    raw_case("cr-only-line-ends", [SESSION.replace("\n", "\r"), chunk(OK).replace("\n", "\r"),
                                   done(OK).replace("\n", "\r")], Expect("ok", OK)),
    raw_case("mixed-line-ends", ['data: {"type": "chunk", "content": "好"}\r\n\r', '\ndata: {"type": "chunk",',
                                 ' "content": "的"}\n\r', 'data: {"type": "done"}\r\n\r\n'], Expect("ok", "好的")),
    raw_case("crlf-split-across-writes", [chunk("一").replace("\n\n", "\r"), "\n\r", "\n" + done("一")],
             Expect("ok", "一")),
    raw_case("utf8-split-across-writes", [b'data: {"type": "chunk", "content": "\xe5', b'\xa5\xbd"}\n\n', done("好")],
             Expect("ok", "好")),
    raw_case("bad-utf8-bytes", [b'data: {"type": "chunk", "content": "\xff\xfe\xc3\x28\xed\xa0\x80X"}\n\n',
                                b'data: {"type": "done"}\n\n'], Expect("ok", "\ufffd" * 3 + "(" + "\ufffd" * 3 + "X")),
    raw_case("bom-first", ["\ufeff" + chunk(OK), done()], Expect("ok", OK)),
    raw_case("data-without-space-and-multiline", ['data:{"type": "chunk",\ndata:"content": "好"}\n\n', done()],
             Expect("ok", "好")),
    raw_case("unicode-line-separators-are-text", [chunk("一\u2028二\u0085三"), done()], Expect("ok", "一\u2028二\u0085三")),
    raw_case("unterminated-last-frame-dropped", [chunk("有"), '{"type": "done", "full_text": "别的"}'], Expect("ok", "有")),
    # characters in the text
    raw_case("raw-nul-byte-frame-skipped", [b'data: {"type": "chunk", "content": "a\x00b"}\n\n', chunk(OK), done()],
             Expect("ok", OK)),
    raw_case("escaped-nul", [chunk("空\u0000字符"), done()], Expect("ok", "空字符")),
    raw_case("ansi-escapes", [chunk("\u001b[31m红色\u001b[0m"), chunk("\u001b[2J\u001b[1;1H清屏"), done()],
             Expect("ok", "红色清屏")),
    raw_case("osc-title-and-bell", [chunk("\u001b]0;假标题\u0007正文\u0007\u0008"), done()], Expect("ok", "正文")),
    raw_case("only-control-characters", [chunk("\u0001\u0002\u001b[0m"), chunk(OK), done()], Expect("ok", OK)),
    raw_case("lone-surrogate-escapes", [sse('{"type": "chunk", "content": "\\ud800半"}'), done()],
             Expect("ok", "\ud800半")),  # kept as sent here; the tool's events make it valid (events.py)
    # frames of the wrong shape
    raw_case("chunk-content-not-a-string", [sse({"type": "chunk", "content": 7}),
                                            sse({"type": "chunk", "content": {"a": 1}}), chunk(OK), done()],
             Expect("ok", OK)),
    raw_case("type-missing-or-odd", [sse({"content": "x"}), sse({"type": ["chunk"], "content": "x"}), chunk(OK), done()],
             Expect("ok", OK)),
    raw_case("top-level-not-an-object", [sse("[1, 2]"), sse('"chunk"'), sse("3"), chunk(OK), done()], Expect("ok", OK)),
    raw_case("done-full-text-not-a-string", [chunk(OK), done(None, full_text=["x"])], Expect("ok", OK)),
    raw_case("done-chart-not-an-object", [chunk(OK), done(OK, chart=[1, 2])], Expect("ok", OK)),
    raw_case("nothing-but-done", [done()], Expect("ok", EMPTY_ANSWER_TEXT)),
    raw_case("numbers-past-what-json-parses", [chunk(OK), sse('{"type": "done", "chart": {"n": 1' + "0" * 5000 + "}}")],
             Expect("ok", OK)),
    # error frames
    raw_case("huge-integer-code", [sse('{"type": "error", "code": 4' + "0" * 5000 + ', "message": "坏"}'), done()],
             Expect("error", ERROR_EVENT_TEXT.format(message="坏"), code=SUBAGENT_INTERNAL)),
    raw_case("infinite-code", [sse('{"type": "error", "code": 1e400, "message": "坏"}'), done()],
             Expect("error", ERROR_EVENT_TEXT.format(message="坏"), code=SUBAGENT_INTERNAL)),
    raw_case("code-and-message-objects", [sse({"type": "error", "code": {"v": 40102}, "message": {"zh": "坏"}}), done()],
             Expect("error", ERROR_EVENT_TEXT.format(message="未知错误"), code=SUBAGENT_INTERNAL)),
    raw_case("message-a-list", [sse({"type": "error", "code": [40102], "message": ["a", "b"]})],
             Expect("error", ERROR_EVENT_TEXT.format(message="未知错误"), code=SUBAGENT_INTERNAL)),
    raw_case("message-of-a-megabyte", [sse({"type": "error", "code": 50001, "message": "错" * 300_000})],
             Expect("error", ERROR_EVENT_TEXT.format(message="错" * ERROR_MESSAGE_MAX_CHARS + "…"),
                    code=SUBAGENT_INTERNAL)),
    raw_case("message-with-escapes", [sse({"type": "error", "code": "40102", "message": "\u001b[31m过期\u0000"})],
             Expect("error", ERROR_EVENT_TEXT.format(message="过期"), code=CAMPUS_TOKEN_EXPIRED)),
    raw_case("code-padded-string", [sse({"type": "error", "code": " 40102 ", "message": "过期"})],
             Expect("error", ERROR_EVENT_TEXT.format(message="过期"), code=CAMPUS_TOKEN_EXPIRED)),
    raw_case("error-after-many-chunks", [chunk("多") * 500, sse({"type": "error", "code": True, "message": "坏"})],
             Expect("error", ERROR_EVENT_TEXT.format(message="坏"), code=SUBAGENT_INTERNAL)),
    Case("error-then-hang", "[[mode:error_hang]]",
         Expect("error", ERROR_EVENT_TEXT.format(message=ERROR_MESSAGE), code=SUBAGENT_INTERNAL)),
    # not an event stream at all
    raw_case("html-200", ["<html>" * 100_000], Expect("failed", CONNECT_FAILED_TEXT.format(
        reason=NOT_SSE_REASON.format(content_type="text/html"))), media="text/html"),
    raw_case("no-content-type", ["x" * 100_000], Expect("failed", CONNECT_FAILED_TEXT.format(
        reason=NOT_SSE_REASON.format(content_type="无"))), media=""),
    Case("http-500", "[[mode:http500]]", Expect("failed", HTTP_ERROR_TEXT.format(status=500))),
    Case("deep-nesting", "[[mode:deep]]今天吃啥", Expect("ok", NORMAL)),
]


def _a2a(id_: str, frames, expect: Expect, **extra) -> Case:
    return raw_case(id_, frames, expect, **extra)


def _updates(*results) -> callable:
    return lambda rpc_id: [rpc_frame(rpc_id, r) for r in results]


def _flood(rpc_id):
    frame = rpc_frame(rpc_id, artifact_update("洪" * 21_000)).encode()
    for _ in range(50 * MB // len(frame)):
        yield frame


def _long_line(rpc_id):
    yield rpc_frame(rpc_id, artifact_update("前面的话。", append=False))
    yield 'data: {"jsonrpc": "2.0", "id": ' + json.dumps(rpc_id) + ', "result": {"artifactUpdate": {"taskId": "t", "artifact": {"artifactId": "a", "parts": [{"text": "'
    piece = "长" * (MB // 3)
    for _ in range(30):
        yield piece


def _many_events(rpc_id):
    frame = rpc_frame(rpc_id, status_update("TASK_STATE_WORKING"))
    for _ in range(100):
        yield frame * 1000


WORKING = status_update("TASK_STATE_WORKING", "查询中")
COMPLETED = status_update("TASK_STATE_COMPLETED")

A2A_CASES = [
    _a2a("a2a-flood-50mb", _flood, Expect("cut", lambda kept: kept.startswith("洪" * 21_000) and set(kept) == {"洪"},
                                          CUT_BYTES.format(limit="4 MB")), caps={"A2A_TEXT_MAX_BYTES": 64 * MB}),
    _a2a("a2a-flood-past-the-text-cap", _flood, Expect("cut", "洪" * (MB // 3), CUT_TEXT.format(limit="1 MB"))),
    _a2a("a2a-long-line-30mb", _long_line, Expect("cut", "前面的话。", line_cut("2 MB"))),
    _a2a("a2a-many-events-100k", _many_events, Expect("cut", "", CUT_EVENTS.format(limit="10,000"))),
    Case("a2a-text-past-its-cap", "[[mode:bigtext]]", Expect("cut", "书" * (MB // 3), CUT_TEXT.format(limit="1 MB"))),
    Case("a2a-plain-send-text-past-its-cap", "[[mode:bigtext]] plain",
         Expect("cut", "书" * (MB // 3), CUT_TEXT.format(limit="1 MB"))),
    Case("a2a-events-cap", "图书馆", Expect("cut", "A2A已收到：", CUT_EVENTS.format(limit="4")),
         caps={"A2A_MAX_EVENTS": 4}),
    Case("a2a-text-cap", "图书馆", Expect("cut", "A2A已收", CUT_TEXT.format(limit="9 字节")),
         caps={"A2A_TEXT_MAX_BYTES": 9}),
    Case("a2a-bytes-cap", "图书馆", Expect("cut", "", CUT_BYTES.format(limit="300 字节")),
         caps={"A2A_STREAM_MAX_BYTES": 300}),
    _a2a("a2a-cr-only-line-ends", lambda i: [f.replace("\n", "\r") for f in _updates(
        artifact_update("好的", append=False), COMPLETED)(i)], Expect("ok", "好的")),
    _a2a("a2a-bad-utf8", lambda i: [rpc_frame(i, artifact_update("X", append=False)).replace("X", "\udcff").encode(
        "utf-8", "surrogateescape"), rpc_frame(i, COMPLETED)], Expect("ok", "\ufffd")),
    _a2a("a2a-nul-and-ansi", _updates(artifact_update("\u001b[31m红\u0000色\u001b[0m", append=False), COMPLETED),
         Expect("ok", "红色")),
    _a2a("a2a-status-of-a-megabyte-then-failed", _updates(status_update("TASK_STATE_FAILED", "坏" * 600_000)),
         Expect("error", ERROR_EVENT_TEXT.format(message="坏" * 2000 + "…"), code=SUBAGENT_INTERNAL)),
    _a2a("a2a-artifact-replaced-many-times", _updates(*[artifact_update("换" * 1000, append=False)] * 500, COMPLETED),
         Expect("ok", "换" * 1000), streamed_whole=False),  # each replacement is streamed as it came
    _a2a("a2a-frames-not-json", lambda i: ["data: {nope\n\n"], Expect("failed", CONNECT_FAILED_TEXT.format(reason=""))),
    _a2a("a2a-rpc-error-object", lambda i: [sse({"jsonrpc": "2.0", "id": i, "error": {"code": 10 ** 40,
                                                                                    "message": "坏"}})],
         Expect("failed", "")),
    _a2a("a2a-completed-without-text", _updates(COMPLETED), Expect("ok", EMPTY_ANSWER_TEXT)),
    _a2a("a2a-message-past-the-text-cap", _updates({"message": {"messageId": "m", "role": "ROLE_AGENT",
                                                                "parts": [{"text": "信" * 400_000}]}}),
         Expect("cut", "信" * (MB // 3), CUT_TEXT.format(limit="1 MB"))),
    _a2a("a2a-working-then-stream-ends", _updates(WORKING), Expect("failed", CONNECT_FAILED_TEXT.format(reason=""))),
]


@pytest.fixture
def watched():
    """Runs a call under tracemalloc and a ticker; returns (result, memory peak, longest loop gap)."""

    async def run(call):
        gaps: list[float] = []
        stop = asyncio.Event()
        # The test process holds every module and fixture of the suite: a full collection of it
        # mid-call (0.6 s once, late in a run) is the collector's stall, not the client's. As a
        # worker does after start-up (campus_agent/asgi.py), what exists now is frozen first.
        gc.collect()
        gc.freeze()
        ticker = asyncio.create_task(loop_held_ticker(gaps, stop))
        tracemalloc.start()
        try:
            result = await call()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            stop.set()
            await ticker  # before tracemalloc.stop(), which takes a while and is no one's stall
            tracemalloc.stop()
            gc.unfreeze()
        return result, peak, max(gaps, default=0.0)

    return run


def _check(reply, seen: list[str], case: Case, peak: int, gap: float) -> None:
    expect = case.expect
    assert peak < MEMORY_PEAK_MAX, f"memory peak {peak / MB:.1f} MB"
    assert gap < LOOP_GAP_MAX_SEC, f"event loop held {gap:.2f} s"
    if expect.kind == "ok":
        assert (reply.ok, reply.cut) == (True, None), reply.text[:300]
        assert reply.text == expect.text
    elif expect.kind == "cut":
        assert reply.ok and reply.cut and reply.cut.startswith(expect.reason), reply.text[-300:]
        kept, _, marker = reply.text.partition(CUT_HEAD)
        kept = kept.removesuffix("\n\n")
        assert expect.text(kept) if callable(expect.text) else kept == expect.text
        assert expect.reason in marker and "其后的内容没有读取" in marker
        # the student was streamed what the model gets: the kept text, then the marker
        assert "".join(seen).endswith(reply.text) and CUT_HEAD in seen[-1]
    elif expect.kind == "error":
        assert (reply.ok, reply.code, reply.text) == (False, expect.code, expect.text)
    else:
        assert not reply.ok and reply.text.startswith(expect.text), reply.text[:300]
    if reply.ok and expect.kind == "ok" and seen and case.streamed_whole:
        assert "".join(seen) == reply.text or reply.text == EMPTY_ANSWER_TEXT


@pytest.fixture
def slow_sub_agent(sub_agent_factory):
    """The contract sub-agent with a deadline no case reaches: every case ends by a cap or its answer."""
    return sub_agent_factory(timeout_sec=20)


@pytest.mark.django_db
@pytest.mark.parametrize("case", SSE_CASES, ids=[c.id for c in SSE_CASES])
async def test_hostile_seed_contract_sub_agent(case, settings, slow_sub_agent, subagent_server, watched):
    for name, value in case.caps.items():
        setattr(settings, name, value)
    if case.raw is not None:
        subagent_server.raw_bodies[case.id] = case.raw
        if case.media is not None:
            subagent_server.raw_media[case.id] = case.media
    row = slow_sub_agent
    seen: list[str] = []

    async def on_chunk(text: str) -> None:
        seen.append(text)

    async def call():
        return await subagent_call(sub_agent=row, message=case.message, request_id="0123456789abcdef",
                                   conversation_id="conv-1", campus_token=None, on_chunk=on_chunk)

    try:
        reply, peak, gap = await watched(call)
    finally:
        await subagent_client_close()
    _check(reply, seen, case, peak, gap)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("case", A2A_CASES, ids=[c.id for c in A2A_CASES])
async def test_hostile_a2a_sub_agent(case, settings, a2a_sub_agent_factory, a2a_server, watched):
    for name, value in case.caps.items():
        setattr(settings, name, value)
    variant = "stream"
    if case.raw is not None:
        a2a_server.raw_bodies[case.id] = case.raw
        variant = "raw"
    elif case.message.endswith(" plain"):
        variant = "plain"
    row = await sync_to_async(a2a_sub_agent_factory)(variant, timeout_sec=20)
    seen: list[str] = []

    async def on_chunk(text: str) -> None:
        seen.append(text)

    async def call():
        return await a2a_call(sub_agent=row, message=case.message.removesuffix(" plain"), request_id="0123456789abcdef",
                              conversation_id="conv-1", campus_token=None, on_chunk=on_chunk)

    try:
        reply, peak, gap = await watched(call)
    finally:
        await a2a_client_close()
    # Status lines ("查询中\n") are progress, streamed but not part of the answer.
    shown = [text for text in seen if not text.endswith("\n") or CUT_HEAD in text]
    _check(reply, shown, case, peak, gap)


def test_there_are_enough_cases():
    assert len(SSE_CASES) + len(A2A_CASES) >= 40
    assert len({c.id for c in SSE_CASES + A2A_CASES}) == len(SSE_CASES) + len(A2A_CASES)
    assert size_text(4 * MB) == "4 MB" and size_text(1536) == "1.5 KB" and size_text(9) == "9 字节"


# --- the model's side, and the whole stack -------------------------------------------------------

CTX = RunContext(request_id="0123456789abcdef", conversation_id="conv-1", user_id=1, campus_token=None)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("mode", ["flood", "longline", "manyframes"])
async def test_the_model_is_told_the_sub_agent_answer_was_cut(mode, llm_settings, agent, subagent_server):
    llm = llm_settings
    llm.reply_tool_calls(("call_canteen", {"message": f"[[mode:{mode}]]"}))
    llm.reply_text("子 Agent 的回答太长，只收到了一部分。")
    history = [{"role": "user", "content": "全部菜单"}]
    try:
        events = [e async for e in turn_stream(agent=agent, history=history, ctx=CTX)]
    finally:
        await subagent_client_close()
    result = next(e for e in events if isinstance(e, ToolResult))
    assert result.ok and CUT_HEAD in result.content
    told = llm.requests[1].messages[-1]
    assert told["role"] == "tool" and CUT_HEAD in told["content"]
    assert CUT_HEAD in [e for e in events if isinstance(e, ToolChunk)][-1].content  # the student is shown it
    if mode != "manyframes":  # 100,000 small frames are all written (4 MB) before the gateway reads far
        assert subagent_server.stream_cut.wait(5)  # the gateway hung up (the server notices a moment later): the rest was never sent


@pytest.mark.django_db(transaction=True)
async def test_the_model_is_told_the_a2a_answer_was_cut(llm_settings, agent_factory, a2a_sub_agent_factory, a2a_server):
    row = await sync_to_async(a2a_sub_agent_factory)("stream")
    agent = await sync_to_async(agent_factory)(sub_agents=[row])
    llm = llm_settings
    llm.reply_tool_calls(("call_library", {"message": "[[mode:bigtext]]"}))
    llm.reply_text("只收到了一部分。")
    try:
        events = [e async for e in turn_stream(agent=agent, history=[{"role": "user", "content": "书"}], ctx=CTX)]
    finally:
        await a2a_client_close()
    result = next(e for e in events if isinstance(e, ToolResult))
    assert result.ok and CUT_HEAD in result.content
    assert CUT_HEAD in llm.requests[1].messages[-1]["content"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("mode", ["flood", "manyframes"])
def test_a_hostile_sub_agent_through_the_chat_endpoint(mode, live_asgi, llm_settings, agent, user, subagent_server):
    token = auth_session_create(user=user, via=AuthSession.Via.PASSWORD, roles=["student"]).access_token
    llm_settings.reply_tool_calls(("call_canteen", {"message": f"[[mode:{mode}]]"}))
    llm_settings.reply_text("只收到了一部分。")
    result = chat(live_asgi, {"message": "全部菜单"}, headers={"Authorization": f"Bearer {token}"}, timeout=60)
    assert result.status == 200 and result.types[0] == "session" and result.types[-1] == "done"
    assert "error" not in result.types
    (tool_result,) = result.of("tool_result")
    assert tool_result["ok"] is True
    assert CUT_HEAD in result.of("tool_chunk")[-1]["content"]
    rows = list(Message.objects.filter(conversation_id=result.frames[0]["conversation_id"]).order_by("created_at"))
    tool_row = next(r for r in rows if r.role == "tool")
    assert CUT_HEAD in tool_row.content and rows[-1].content == "只收到了一部分。"
