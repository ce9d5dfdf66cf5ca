"""Caps on what one sub-agent call may send (issue 20), and the readers that hold them.

A sub-agent is a service staff registered, not a trusted one: its answer is read with a bounded
memory and a bounded CPU however it misbehaves (a 30 MB line, 100,000 frames, an endless stream).

    caps = StreamCaps.subagent()                       # from settings, read per call
    async for event in sse_events(response.aiter_raw(), caps=caps):   # (event, data) per frame
        ...                                            # raises StreamCut at a cap
    transport = CappedTransport(inner, caps=...)       # A2A: the same byte and line caps under a2a-sdk

Why not httpx-sse: its `SSELineDecoder` keeps the pieces of a line in a list until the line
ends, and its `SSEDecoder` every `data:` line of a frame, so one endless line, or endless
`data:` lines, grow without limit before the caller sees anything. Here lines are cut out of
the raw bytes (SSE line ends: CRLF, CR, LF), each refused past `line_max_bytes`; a frame's data
is refused past the same size; every frame counts towards `max_frames`, and every so many frames
the reader yields to the event loop, so a sub-agent that sends 100,000 frames in one burst cannot
hold the worker.

Past any cap the reader raises `StreamCut`; the client keeps what it had and ends the call with
`cut_marker(...)` after it, which tells the model and the student that the answer was cut.
"""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
from django.conf import settings

# The frames (and the lines) read between two yields to the event loop.
YIELD_EVERY_FRAMES = 64
YIELD_EVERY_LINES = 1024

CUT_MARKER = "\n\n[子 Agent 的回答已截断：{reason}。以上是截断前收到的 {kept} 个字，其后的内容没有读取。]"
CUT_BYTES = "回答超过了 {limit} 的上限"
CUT_LINE = "其中一帧数据超过了 {limit} 的上限（已丢弃至少 {dropped}）"
CUT_FRAMES = "回答超过了 {limit} 帧的上限"
CUT_TEXT = "回答的文本超过了 {limit} 的上限"
CUT_EVENTS = "回答超过了 {limit} 个事件的上限"


def size_text(n: int) -> str:
    """4194304 → "4 MB", 1536 → "1.5 KB", 900 → "900 字节"."""
    for unit, size in (("MB", 1024 * 1024), ("KB", 1024)):
        if n >= size:
            value = f"{n / size:.1f}".removesuffix(".0")
            return f"{value} {unit}"
    return f"{n} 字节"


class StreamCut(Exception):
    """A cap was reached; `reason` says which, in words for the marker."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def cut_marker(*, reason: str, kept: int) -> str:
    """What follows the kept text of a cut answer (for the model and the student)."""
    return CUT_MARKER.format(reason=reason, kept=f"{kept:,}")


@dataclass(frozen=True, slots=True)
class StreamCaps:
    max_bytes: int
    line_max_bytes: int
    max_frames: int

    @classmethod
    def subagent(cls) -> StreamCaps:
        """The seed contract's caps (SUBAGENT_STREAM_MAX_BYTES, SUBAGENT_SSE_LINE_MAX_BYTES,
        SUBAGENT_STREAM_MAX_FRAMES)."""
        return cls(settings.SUBAGENT_STREAM_MAX_BYTES, settings.SUBAGENT_SSE_LINE_MAX_BYTES,
                   settings.SUBAGENT_STREAM_MAX_FRAMES)

    @classmethod
    def a2a(cls) -> StreamCaps:
        """A2A's (A2A_STREAM_MAX_BYTES, A2A_LINE_MAX_BYTES, A2A_MAX_EVENTS)."""
        return cls(settings.A2A_STREAM_MAX_BYTES, settings.A2A_LINE_MAX_BYTES, settings.A2A_MAX_EVENTS)

    def bytes_cut(self) -> StreamCut:
        return StreamCut(CUT_BYTES.format(limit=size_text(self.max_bytes)))

    def line_cut(self, dropped: int) -> StreamCut:
        return StreamCut(CUT_LINE.format(limit=size_text(self.line_max_bytes), dropped=size_text(dropped)))


class LineSplitter:
    """Cuts SSE lines out of raw bytes, none longer than `line_max_bytes` (StreamCut past it).
    `bytes.splitlines` breaks at exactly the SSE line ends (CRLF, CR, LF) and does it in C."""

    def __init__(self, caps: StreamCaps):
        self.caps = caps
        self._rest = b""  # the start of a line whose end has not come yet

    def feed(self, data: bytes) -> list[bytes]:
        buf = self._rest + data if self._rest else bytes(data)
        hold_cr = buf.endswith(b"\r")  # perhaps the first half of a CRLF: decided by the next byte
        body = buf[:-1] if hold_cr else buf
        end = max(body.rfind(b"\n"), body.rfind(b"\r"))
        rest = body[end + 1:]
        if len(rest) > self.caps.line_max_bytes:
            raise self.caps.line_cut(len(rest))
        self._rest = rest + b"\r" if hold_cr else rest
        if end < 0:
            return []
        lines = body[:end + 1].splitlines()
        longest = max(map(len, lines), default=0)
        if longest > self.caps.line_max_bytes:
            raise self.caps.line_cut(longest)
        return lines

    def flush(self) -> list[bytes]:
        rest, self._rest = self._rest, b""
        return rest.splitlines()


async def sse_events(chunks: AsyncIterator[bytes], *, caps: StreamCaps) -> AsyncIterator[tuple[str, str]]:
    """The (event, data) of each frame of an SSE body, as the SSE standard reads them (`data:`
    with or without the space, several `data:` lines joined with "\\n", comments and unknown
    fields skipped, bytes that are not UTF-8 replaced). Raises StreamCut at a cap: bytes, a line
    or a frame's data past `line_max_bytes`, frames past `max_frames` (the frames before it are
    yielded first)."""
    splitter = LineSplitter(caps)
    received = 0
    frames = 0
    event = ""
    data: list[str] = []
    data_bytes = 0
    first = True

    def lines_of(raw_lines):
        nonlocal first
        for raw in raw_lines:
            line = raw.decode("utf-8", "replace")
            if first:
                first = False
                line = line.removeprefix("\ufeff")  # the standard allows one leading BOM
            yield line

    async def feed(raw_lines):
        nonlocal event, data, data_bytes, frames
        for index, line in enumerate(lines_of(raw_lines), 1):
            if index % YIELD_EVERY_LINES == 0:
                await asyncio.sleep(0)  # blank lines or comments by the million hold no frame count
            if not line:
                if data:
                    frames += 1
                    if frames > caps.max_frames:
                        raise StreamCut(CUT_FRAMES.format(limit=f"{caps.max_frames:,}"))
                    yield event, "\n".join(data)
                    if frames % YIELD_EVERY_FRAMES == 0:
                        await asyncio.sleep(0)  # let the loop serve others between bursts
                event, data, data_bytes = "", [], 0
                continue
            if line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "data":
                data_bytes += len(value) + 1
                if data_bytes > caps.line_max_bytes:
                    raise caps.line_cut(data_bytes)
                data.append(value)
            elif name == "event":
                event = value

    async for chunk in chunks:
        room = caps.max_bytes - received
        over = len(chunk) > room
        if over:
            chunk = chunk[:room]  # what arrived within the cap is still read
        received += len(chunk)
        async for item in feed(splitter.feed(chunk)):
            yield item
        if over:
            raise caps.bytes_cut()
    async for item in feed(splitter.flush()):
        yield item
    # A frame without its closing blank line is dropped, as the standard says.


class _CappedStream(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, caps: StreamCaps, on_cut):
        self.inner = inner
        self.caps = caps
        self.on_cut = on_cut

    async def __aiter__(self):
        received = 0
        run = 0  # bytes since the last line end
        async for chunk in self.inner:
            received += len(chunk)
            if received > self.caps.max_bytes:
                raise self.on_cut(self.caps.bytes_cut())
            end = max(chunk.rfind(b"\n"), chunk.rfind(b"\r"))
            run = len(chunk) - end - 1 if end >= 0 else run + len(chunk)
            if run > self.caps.line_max_bytes:
                raise self.on_cut(self.caps.line_cut(run))
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


class StreamCapExceeded(httpx.ReadError):
    """Raised inside a response body read by a client we do not own (a2a-sdk's): an httpx error,
    so the SDK passes it on as a transport failure; the caller finds it in the exception chain."""

    def __init__(self, cut: StreamCut):
        super().__init__(cut.reason)
        self.cut = cut


class CappedTransport(httpx.AsyncBaseTransport):
    """Wraps a transport: every response body it gives is cut (StreamCapExceeded) past the caps'
    bytes, or past a line longer than their line size, before anyone buffers it."""

    def __init__(self, inner: httpx.AsyncBaseTransport, caps_of):
        self.inner = inner
        self.caps_of = caps_of  # called per response: settings may change (tests, admin)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if request.method != "GET":  # the Agent Card (a GET) has its own, smaller cap (a2a_card.py)
            response.stream = _CappedStream(response.stream, self.caps_of(), StreamCapExceeded)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


def stream_cut_of(exc: BaseException | None) -> StreamCut | None:
    """The StreamCut behind an exception an SDK raised, if any (its cause or context chain)."""
    seen = 0
    while exc is not None and seen < 20:
        if isinstance(exc, StreamCapExceeded):
            return exc.cut
        if isinstance(exc, StreamCut):
            return exc
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None
