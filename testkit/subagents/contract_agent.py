"""A contract sub-agent (docs/design.md#sub-agents) with fault modes, for tests and demos.

`POST /api/v1/chat` answers with the SSE frames of the sub-agent contract (docs/design.md#sub-agents). The behaviour is chosen per call by a marker
in the message text, `[[mode:<name>]]` (so an end-to-end test can pick it through the model's
tool arguments), else by the server's `default_mode`:

    normal     session, several chunks (paced by `chunk_delay`), tool_call/tool_result, done + chart
    timeout    sleeps `stall_sec` before answering anything (longer than any test timeout)
    trickle    a chunk every 0.2 s, forever (only a whole-stream deadline ends it)
    http500    HTTP 500 (any `http<status>`, e.g. `http404`, `http429`, answers that status)
    error      an `error` event (50001, ERROR_MESSAGE), then `done`
    expired    an `error` event 40102 (campus token expired), then `done`
    quirky     legal but unusual SSE: CRLF line ends, `data:` without the space, comment lines,
               `event:`/`id:` fields, one JSON split over several `data:` lines
    nonjson    frames that are not JSON (must be ignored) mixed into a normal answer
    drop       one chunk, then the connection is cut mid-stream
    malformed  text a JavaScript service may send: lone surrogates (as the JSON escapes "\\ud800"),
               NUL, a surrogate pair split over two chunks; in chunks, `done` and its chart
    huge       one chunk of HUGE_CHUNK (about 1 MB), then `done`
    deep       a frame nested DEEP_LEVELS deep (must be ignored), then a normal answer
    coded      an `error` event whose `code` is the JSON value written after the marker
               (`[[mode:coded]] "40102"`, `[[mode:coded]] null` …), then `done`

Hostile answers (issue 20: the gateway must cap them; each streams from a generator, so the
server never holds what it sends):

    flood      FLOOD_BYTES (50 MB) of 64 KB chunks, no `done`
    longline   one `data:` line of LONG_LINE_BYTES (30 MB) sent in 1 MB pieces, never ended
    manyframes MANY_FRAMES (100,000) one-character chunks, a thousand per write, then `done`
    held       the first normal chunk, then nothing until `release` (a threading.Event) is set,
               then the rest and `done`: a test sees what the gateway did with the first chunk
               while the sub-agent is still answering
    raw        the bytes of `raw_bodies[<key>]` (`[[mode:raw]] <key>`): a test's own frames, as
               bytes, a list of byte pieces or a callable returning either

Every request is recorded in `.requests` (headers lower-cased, Authorization included, body).
"""
from __future__ import annotations

import asyncio
import json
import re
import threading
from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from testkit.servers import ServedApp

MODE_PATTERN = re.compile(r"\[\[mode:([a-z0-9_-]+)\]\]")
MODES = ("normal", "timeout", "trickle", "http500", "error", "expired", "quirky", "nonjson", "drop",
         "malformed", "huge", "deep", "coded", "flood", "longline", "manyframes", "held", "raw")
ERROR_MESSAGE = "教务系统维护中"
EXPIRED_MESSAGE = "校园令牌已过期，请重新登录"
CHART = {
    "type": "bar",
    "title": "各食堂当前人数",
    "labels": ["一食堂", "二食堂", "三食堂"],
    "datasets": [{"label": "人数", "data": [120, 80, 45]}],
}  # the one chart shape (docs/api.md, `done.chart`)
# The `malformed` answer: a lone high surrogate (an emoji cut in half), NUL, a lone low
# surrogate, and an emoji whose two halves arrive in separate chunks.
MALFORMED_CHUNKS = ["半个表情\ud83d", "空\x00字符", "\udc00尾巴", "完整\ud83d", "\ude00。"]
MALFORMED_CHART = {**CHART, "title": "人数\ud800", "labels": ["一食堂\x00", "二食堂", "三食堂"]}
HUGE_CHUNK = "测" * 350_000  # 1.05 MB as UTF-8, in one frame
FLOOD_BYTES = 50 * 1024 * 1024
FLOOD_PIECE = "洪" * 21_000  # about 64 KB a frame
LONG_LINE_BYTES = 30 * 1024 * 1024
MANY_FRAMES = 100_000
MANY_FRAMES_TEXT = "多"
DEEP_LEVELS = 100_000


def answer_chunks(message: str) -> list[str]:
    """The text pieces a normal answer streams; their concatenation is `full_text`."""
    clean = MODE_PATTERN.sub("", message).strip()
    return ["子Agent", "已收到：", clean or "（空）", "。", "这是查询结果。"]


def mode_of(message: str, default: str) -> str:
    found = MODE_PATTERN.search(message or "")
    return found.group(1) if found else default


@dataclass
class RecordedCall:
    headers: dict[str, str]
    body: dict

    @property
    def message(self) -> str:
        return self.body.get("message", "")


def _frame(payload: dict) -> str:
    data = json.dumps(payload, ensure_ascii=False)
    if not data.isascii():
        try:
            data.encode()
        except UnicodeEncodeError:  # a lone surrogate goes on the wire as its JSON escape "\ud800"
            data = json.dumps(payload)
    return f"data: {data}\n\n"


class ContractAgent(ServedApp):
    def __init__(self, *, name: str = "demo", default_mode: str = "normal", chunk_delay: float = 0.02,
                 stall_sec: float = 30.0):
        self.name = name
        self.default_mode = default_mode
        self.chunk_delay = chunk_delay
        self.stall_sec = stall_sec
        self._state_init()
        self.app = Starlette(
            routes=[
                Route("/api/v1/chat", self._chat, methods=["POST"]),
                Route("/healthz", self._health, methods=["GET"]),
            ]
        )

    def _state_init(self) -> None:
        self.requests: list[RecordedCall] = []
        self.raw_bodies: dict = {}  # `[[mode:raw]] <key>` → bytes | list[bytes] | () -> either
        self.raw_media: dict[str, str] = {}  # `<key>` → the Content-Type of that raw answer (default SSE)
        self.bytes_sent = 0  # by the hostile modes: how much of their answer went out
        self.release = threading.Event()  # lets a `held` answer go on
        # Set when a stream is closed before its end by the gateway (a stop, a deadline): what a
        # real sub-agent observes as the client disconnecting.
        self.stream_cut = threading.Event()

    @property
    def url(self) -> str:
        """The base_url of a SubAgent row (the client appends /api/v1/chat)."""
        return self.root_url

    @property
    def last_request(self) -> RecordedCall:
        return self.requests[-1]

    async def _health(self, request: Request):
        return JSONResponse({"status": "ok"})

    async def _chat(self, request: Request):
        try:
            body = await request.json()
        except ValueError:
            body = {}
        self.requests.append(RecordedCall(headers={k.lower(): v for k, v in request.headers.items()}, body=body))
        mode = mode_of(body.get("message", ""), self.default_mode)
        if mode == "timeout":
            await asyncio.sleep(self.stall_sec)
        if mode.startswith("http") and mode[4:].isdigit():
            return JSONResponse({"code": 50001, "message": "internal"}, status_code=int(mode[4:]))
        stream = getattr(self, f"_mode_{mode}", self._mode_normal)
        media = "text/event-stream"
        if mode == "raw":
            media = self.raw_media.get(MODE_PATTERN.sub("", body.get("message", "")).strip(), media)
        return StreamingResponse(self._observed(stream(body)), media_type=media or None)

    async def _observed(self, frames):
        finished = False
        try:
            async for frame in frames:
                yield frame
            finished = True
        finally:
            if not finished:
                self.stream_cut.set()

    async def _pace(self):
        if self.chunk_delay:
            await asyncio.sleep(self.chunk_delay)

    async def _normal_body(self, body: dict):
        chunks = answer_chunks(body.get("message", ""))
        for piece in chunks:
            await self._pace()
            yield _frame({"type": "chunk", "content": piece})
        yield _frame({"type": "done", "full_text": "".join(chunks), "chart": CHART})

    async def _mode_normal(self, body: dict):
        yield _frame({"type": "session", "session_id": "sub-1", "agent": self.name})
        yield _frame({"type": "tool_call", "tool": "query_db", "args": "{}"})
        yield _frame({"type": "tool_result", "tool": "query_db", "ok": True})
        async for frame in self._normal_body(body):
            yield frame

    _mode_timeout = _mode_normal

    async def _mode_trickle(self, body: dict):
        yield _frame({"type": "session", "session_id": "sub-1"})
        while True:
            await asyncio.sleep(0.2)
            yield _frame({"type": "chunk", "content": "…"})

    async def _mode_error(self, body: dict):
        yield _frame({"type": "session", "session_id": "sub-1"})
        yield _frame({"type": "error", "code": 50001, "message": ERROR_MESSAGE})
        yield _frame({"type": "done", "full_text": ""})

    async def _mode_error_hang(self, body: dict):
        """An error event, then nothing: no `done`, the connection left open."""
        yield _frame({"type": "session", "session_id": "sub-1"})
        yield _frame({"type": "error", "code": 50001, "message": ERROR_MESSAGE})
        await asyncio.sleep(self.stall_sec)

    async def _mode_expired(self, body: dict):
        yield _frame({"type": "session", "session_id": "sub-1"})
        yield _frame({"type": "error", "code": 40102, "message": EXPIRED_MESSAGE})
        yield _frame({"type": "done", "full_text": ""})

    async def _mode_quirky(self, body: dict):
        chunks = answer_chunks(body.get("message", ""))
        yield ": a comment line the parser must skip\r\n\r\n"
        yield 'event: message\r\nid: 1\r\ndata:{"type":"session","session_id":"sub-1"}\r\n\r\n'
        for piece in chunks:
            await self._pace()
            # One JSON value over two `data:` lines: the parser joins them with "\n".
            yield 'data:{"type": "chunk",\r\ndata: "content": ' + json.dumps(piece, ensure_ascii=False) + "}\r\n\r\n"
        done = json.dumps({"type": "done", "full_text": "".join(chunks), "chart": CHART}, ensure_ascii=False)
        yield f"data:{done}\r\n\r\n"

    async def _mode_nonjson(self, body: dict):
        yield "data: this is not json\n\n"
        yield "data: {broken\n\n"
        yield "data: [1, 2]\n\n"
        async for frame in self._normal_body(body):
            yield frame
            yield "data: <html>oops</html>\n\n"

    async def _mode_drop(self, body: dict):
        yield _frame({"type": "session", "session_id": "sub-1"})
        yield _frame({"type": "chunk", "content": "说到一半"})
        await asyncio.sleep(0.05)
        raise ConnectionResetError("contract agent drops the connection mid-stream")

    async def _mode_malformed(self, body: dict):
        yield _frame({"type": "session", "session_id": "sub-1"})
        for piece in MALFORMED_CHUNKS:
            await self._pace()
            yield _frame({"type": "chunk", "content": piece})
        yield _frame({"type": "done", "full_text": "".join(MALFORMED_CHUNKS), "chart": MALFORMED_CHART})

    async def _mode_huge(self, body: dict):
        yield _frame({"type": "session", "session_id": "sub-1"})
        yield _frame({"type": "chunk", "content": HUGE_CHUNK})
        yield _frame({"type": "done", "full_text": HUGE_CHUNK})

    async def _mode_deep(self, body: dict):
        yield "data: " + '{"type": "chunk", "content": ' + "[" * DEEP_LEVELS + "]" * DEEP_LEVELS + "}\n\n"
        async for frame in self._mode_normal(body):
            yield frame

    async def _mode_coded(self, body: dict):
        written = MODE_PATTERN.sub("", body.get("message", "")).strip()
        yield _frame({"type": "session", "session_id": "sub-1"})
        yield "data: " + '{"type": "error", "code": ' + written + ', "message": "' + ERROR_MESSAGE + '"}\n\n'
        yield _frame({"type": "done", "full_text": ""})

    async def _mode_flood(self, body: dict):
        frame = _frame({"type": "chunk", "content": FLOOD_PIECE}).encode()
        yield _frame({"type": "session", "session_id": "sub-1"})
        sent = 0
        while sent < FLOOD_BYTES:
            yield frame
            sent += len(frame)
            self.bytes_sent = sent
            await asyncio.sleep(0)

    async def _mode_longline(self, body: dict):
        yield _frame({"type": "session", "session_id": "sub-1"})
        yield _frame({"type": "chunk", "content": "前面的话。"})
        piece = ("长" * (1024 * 1024 // 3)).encode()
        yield b'data: {"type": "chunk", "content": "'
        sent = 0
        while sent < LONG_LINE_BYTES:
            yield piece
            sent += len(piece)
            self.bytes_sent = sent
            await asyncio.sleep(0)

    async def _mode_manyframes(self, body: dict):
        frame = _frame({"type": "chunk", "content": MANY_FRAMES_TEXT})
        yield _frame({"type": "session", "session_id": "sub-1"})
        for _ in range(MANY_FRAMES // 1000):
            yield frame * 1000
            self.bytes_sent += len(frame) * 1000
            await asyncio.sleep(0)
        yield _frame({"type": "done", "full_text": MANY_FRAMES_TEXT * MANY_FRAMES})

    async def _mode_raw(self, body: dict):
        key = MODE_PATTERN.sub("", body.get("message", "")).strip()
        script = self.raw_bodies[key]
        script = script() if callable(script) else script
        for piece in [script] if isinstance(script, bytes | str) else script:
            yield piece
            await asyncio.sleep(0)

    async def _mode_held(self, body: dict):
        chunks = answer_chunks(body.get("message", ""))
        yield _frame({"type": "session", "session_id": "sub-1"})
        yield _frame({"type": "chunk", "content": chunks[0]})
        await asyncio.to_thread(self.release.wait, self.stall_sec)
        for piece in chunks[1:]:
            yield _frame({"type": "chunk", "content": piece})
        yield _frame({"type": "done", "full_text": "".join(chunks)})
