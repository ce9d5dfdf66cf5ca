"""A scripted OpenAI-compatible chat-completions server for tests and demos.

It speaks the wire format the real providers speak (SSE `chat.completion.chunk` frames, tool
calls streamed as fragments keyed by `index`, usage in a final chunk when the client asks with
`stream_options.include_usage`), so the `openai` SDK and our loop are exercised for real.

Script it with a queue of replies (`reply_text`, `reply_tool_calls`, `fail`, `stall`, or any
`Reply`), or with a function that computes the reply from the request (`responder`), which lets
a browser test run as many turns as it likes. Every request is recorded in `.requests`.

Real providers' streams are kept as fixtures in `streams/` (DashScope, vLLM, DeepSeek, Ollama: one
`.sse` file each, the body's exact bytes after a header of `:` comment lines naming its source);
`replay("name")` answers with one, in its recorded write pieces (`stream_fixture`, `stream_replay`).
See docs/testing.md.
"""
from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from testkit.servers import ServedApp

NO_SCRIPT_MESSAGE = "fake LLM: no scripted reply left"
# DeepSeek's answer to a thinking-mode request whose tool round lost its reasoning, word for word (as
# DeepSeek's API sends it: issues quoting the raw body, e.g. endolith/open-interpreter#215).
REASONING_BACK_REFUSAL = {"error": {"message": "The `reasoning_content` in the thinking mode must be passed back to "
                                               "the API.", "type": "invalid_request_error", "param": None,
                                    "code": "invalid_request_error"}}
STREAM_ERROR_MESSAGE = "fake LLM: scripted error inside the stream"
JUNK_FRAME = "data: {this is not json\n\n"


@dataclass
class ScriptedCall:
    """One tool call the fake model makes. `arguments` may be a dict (sent as JSON) or raw text
    (to test arguments that are not a JSON object)."""

    name: str
    arguments: dict | str = field(default_factory=dict)
    id: str = ""

    def arguments_text(self) -> str:
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments, ensure_ascii=False)


@dataclass
class Reply:
    """What the fake model answers to one request.

    - `text`: streamed in pieces of `chunk_size` characters (with `tool_calls`: text said before
      the calls, as some models do);
    - `reasoning`: a thinking model's reasoning, streamed before the text in pieces of
      `chunk_size`, in the field `reasoning_as` names (`reasoning_content`: DashScope, DeepSeek,
      vLLM; `reasoning`: newer vLLM, Ollama, OpenRouter; `think`: inside `content` between
      `<think>` and `</think>`, as a server without a reasoning parser sends it);
    - `tool_calls`: streamed as fragments by index, `interleave=True` mixes the fragments of
      several calls the way some providers do;
    - `status` ≠ 200: an HTTP error with an OpenAI-style JSON body (500, 429 …);
    - `headers`: extra response headers (`{"Retry-After": "1"}` with a 429);
    - `stall_sec`: wait that long before answering (headers included): a hung upstream;
    - `chunk_delay`: pause between chunks (slow pacing), and between the pieces of a `body`;
    - `hang_after_chunks`: send that many chunks, then stop sending (stream stalls mid-way);
    - `hold_after_chunks` with `release` (a threading.Event): send that many chunks, then wait
      until the test sets `release` (a browser test looks at the page mid-answer);
    - `drop_after_chunks`: send that many chunks, then cut the connection;
    - `error_after_chunks`: send that many chunks, then an `{"error": …}` chunk inside the 200
      stream (as some providers report a failure mid-answer), and end the stream;
    - `junk_after_chunks`: send that many chunks, then a frame that is not JSON (`JUNK_FRAME`),
      then the rest;
    - `error_as_json`: answer status 200 with a JSON error body instead of a stream (some
      providers report quota or moderation failures so);
    - `terse_frames`: frame the stream as some providers do: `data:` without the space, CRLF
      line ends, and a `: keep-alive` comment line before each event;
    - `finish_reason`: the final chunk's `finish_reason` instead of `stop` / `tool_calls` (a cut
      answer: `length`, `content_filter`, Zhipu's `sensitive` …);
    - `usage`: the usage reported in the final chunk (computed from the text when None; any
      JSON value, to test what the client makes of a hostile one);
    - `deltas`: `delta` values (any JSON) sent one chunk each after the text, instead of the
      tool calls — hostile fragments: `{"tool_calls": [{"index": [1], …}]}`;
    - `raw_chunks`: whole chunk payloads (any JSON value) sent as they are, after the text;
    - `body`: a function returning the bytes of the whole body (after the headers), sent as
      they come: hostile answers of any size without building them in memory
      (`many_tool_calls_body`, `huge_text_body`, `endless_line_body`), or a recorded provider
      stream (`stream_replay`). Each piece is one write of the HTTP body. Nothing else is sent.
    """

    text: str = ""
    reasoning: str = ""
    reasoning_as: str = "reasoning_content"
    tool_calls: list[ScriptedCall] = field(default_factory=list)
    status: int = 200
    stall_sec: float = 0.0
    chunk_delay: float = 0.0
    chunk_size: int = 4
    hang_after_chunks: int | None = None
    hold_after_chunks: int | None = None
    release: threading.Event | None = None
    drop_after_chunks: int | None = None
    error_after_chunks: int | None = None
    junk_after_chunks: int | None = None
    terse_frames: bool = False
    error_as_json: bool = False
    interleave: bool = False
    finish_reason: str | None = None
    usage: Any = None
    deltas: list | None = None
    raw_chunks: list | None = None
    body: Callable[[], Iterable[bytes]] | None = None
    headers: dict[str, str] | None = None


@dataclass
class RecordedRequest:
    body: dict
    headers: dict[str, str]  # lower-case names
    peer: tuple[str, int] | None = None  # the client's address: the same port means a reused connection
    at: float = field(default_factory=time.monotonic)  # when it arrived (the retry tests measure waits)

    @property
    def messages(self) -> list[dict]:
        return self.body.get("messages", [])

    @property
    def tools(self) -> list[dict]:
        return self.body.get("tools") or []

    @property
    def tool_names(self) -> list[str]:
        return [t["function"]["name"] for t in self.tools]


Responder = Callable[[RecordedRequest], "Reply | str"]


class FakeLlm(ServedApp):
    """The scripted model. `app` is the Starlette app; `serve()` runs it on loopback."""

    def __init__(self, *, model: str = "fake-model"):
        self.model = model
        self._lock = threading.Lock()
        self._state_init()
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
            ]
        )

    def _state_init(self) -> None:
        # DeepSeek V4's (and Kimi K2's) thinking mode: "for turns that do perform tool calls, the
        # reasoning_content must be fully passed back to the API in all subsequent requests" —
        # a request with an assistant tool_calls message lacking it is refused with HTTP 400.
        self.requires_reasoning_back = False
        self.requests: list[RecordedRequest] = []
        self.model_requests: list[RecordedRequest] = []  # GET /v1/models (the admin's 测试连接)
        self.responder: Responder | None = None
        self._script: deque[Reply] = deque()

    # --- scripting ----------------------------------------------------------------------------
    def queue(self, *replies: Reply | str) -> FakeLlm:
        with self._lock:
            self._script.extend(_as_reply(r) for r in replies)
        return self

    def reply_text(self, text: str, **options) -> FakeLlm:
        return self.queue(Reply(text=text, **options))

    def reply_tool_calls(self, *calls: ScriptedCall | tuple, text: str = "", **options) -> FakeLlm:
        """`reply_tool_calls(("add", {"a": 1}), ("echo", {"text": "hi"}))` — several calls in one turn."""
        scripted = [c if isinstance(c, ScriptedCall) else ScriptedCall(*c) for c in calls]
        return self.queue(Reply(text=text, tool_calls=scripted, **options))

    def fail(self, status: int = 500, *, times: int = 1, headers: dict[str, str] | None = None) -> FakeLlm:
        return self.queue(*[Reply(status=status, headers=headers) for _ in range(times)])

    def stall(self, seconds: float = 30.0) -> FakeLlm:
        return self.queue(Reply(text="（迟到的回答）", stall_sec=seconds))

    def replay(self, *names: str, delay: float = 0.0, piece_bytes: int | None = None) -> FakeLlm:
        """`replay("dashscope_qwen3_thinking_tools", "dashscope_qwen3_thinking_tools_answer")`: one
        reply per recorded stream (streams/NAME.sse), its bytes sent as recorded, `delay` seconds
        between its pieces (see stream_replay for `piece_bytes`)."""
        return self.queue(*[Reply(body=stream_replay(n, piece_bytes=piece_bytes), chunk_delay=delay)
                            for n in names])

    @property
    def pending(self) -> int:
        return len(self._script)

    @property
    def last_request(self) -> RecordedRequest:
        return self.requests[-1]

    # --- serving (serve / stop / root_url: ServedApp) -----------------------------------------
    @property
    def url(self) -> str:
        """The base URL a client is configured with, ending in /v1."""
        return f"{self.root_url}/v1"

    # --- handlers -----------------------------------------------------------------------------
    def _next_reply(self, request: RecordedRequest) -> Reply | None:
        with self._lock:
            if self._script:
                return self._script.popleft()
        if self.responder is not None:
            return _as_reply(self.responder(request))
        return None

    async def _models(self, request: Request) -> JSONResponse:
        self.model_requests.append(RecordedRequest(body={}, headers={k.lower(): v for k, v in request.headers.items()}))
        return JSONResponse({"object": "list", "data": [{"id": self.model, "object": "model"}]})

    async def _chat(self, request: Request):
        body = await request.json()
        recorded = RecordedRequest(body=body, headers={k.lower(): v for k, v in request.headers.items()},
                                   peer=tuple(request.client) if request.client else None)
        self.requests.append(recorded)
        if self.requires_reasoning_back and _reasoning_missing(body):
            return JSONResponse(REASONING_BACK_REFUSAL, status_code=400)
        reply = self._next_reply(recorded)
        if reply is None:
            return _error_response(500, NO_SCRIPT_MESSAGE)
        if reply.stall_sec:
            await asyncio.sleep(reply.stall_sec)
        if reply.status != 200:
            return _error_response(reply.status, f"fake LLM scripted status {reply.status}", headers=reply.headers)
        if reply.error_as_json:
            return JSONResponse({"error": {"message": STREAM_ERROR_MESSAGE, "type": "server_error"}})
        model = body.get("model") or self.model
        if not body.get("stream"):
            return JSONResponse(_completion(reply, model))
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return StreamingResponse(
            self._stream(reply, model, include_usage, request), media_type="text/event-stream"
        )

    async def _stream(self, reply: Reply, model: str, include_usage: bool, request: Request):
        if reply.body is not None:
            for sent, block in enumerate(reply.body()):
                if sent and reply.chunk_delay:
                    await asyncio.sleep(reply.chunk_delay)
                yield block
                await asyncio.sleep(0)  # let the client go away; the server's loop breathe
            return
        chunks = list(_chunks(reply, model))
        if include_usage:
            chunks.append(_chunk_envelope(model, [], usage=_usage(reply)))
        for sent, payload in enumerate(chunks):
            if reply.hang_after_chunks is not None and sent >= reply.hang_after_chunks:
                await asyncio.sleep(3600)  # the client's timeout (or its going away) ends this
            if reply.release is not None and sent == reply.hold_after_chunks:
                await _released(reply.release)
            if reply.drop_after_chunks is not None and sent >= reply.drop_after_chunks:
                raise ConnectionResetError("fake LLM drops the connection")
            if reply.error_after_chunks is not None and sent >= reply.error_after_chunks:
                yield _frame({"error": {"message": STREAM_ERROR_MESSAGE, "type": "server_error"}}, reply)
                return
            if sent and reply.chunk_delay:
                await asyncio.sleep(reply.chunk_delay)
            if reply.junk_after_chunks is not None and sent == reply.junk_after_chunks:
                yield JUNK_FRAME
            yield _frame(payload, reply)
        yield _frame("[DONE]", reply)


def _reasoning_missing(body: dict) -> bool:
    """An assistant message that called tools without its `reasoning_content` (a string)."""
    return any(isinstance(m, dict) and m.get("role") == "assistant" and m.get("tool_calls")
               and not isinstance(m.get("reasoning_content"), str) for m in body.get("messages") or [])


async def _released(event: threading.Event) -> None:
    """Waits for a test's threading.Event without blocking the server's loop (bounded: a test
    that forgets to set it fails on its own, and this server goes on)."""
    await asyncio.to_thread(event.wait, 60)


def _json(payload: dict) -> str:
    """Readable JSON; text that UTF-8 cannot carry (a lone surrogate in `Reply.text`) goes on the
    wire as its JSON escape "\\ud800", as a real server written in JavaScript would send it."""
    data = json.dumps(payload, ensure_ascii=False)
    if not data.isascii():
        try:
            data.encode()
        except UnicodeEncodeError:
            data = json.dumps(payload)
    return data


def _frame(payload: dict | str, reply: Reply) -> str:
    data = payload if isinstance(payload, str) else _json(payload)
    if reply.terse_frames:
        return f": keep-alive\r\ndata:{data}\r\n\r\n"
    return f"data: {data}\n\n"


def _as_reply(value: Reply | str) -> Reply:
    return value if isinstance(value, Reply) else Reply(text=value)


def _error_response(status: int, message: str, *, headers: dict[str, str] | None = None) -> JSONResponse:
    kind = "rate_limit_error" if status == 429 else "server_error"
    return JSONResponse({"error": {"message": message, "type": kind, "code": str(status)}}, status_code=status,
                        headers=headers)


def _usage(reply: Reply) -> dict:
    if reply.usage is not None:
        return reply.usage
    completion = len(reply.text) + sum(len(c.arguments_text()) for c in reply.tool_calls)
    return {"prompt_tokens": 10, "completion_tokens": completion, "total_tokens": 10 + completion}


def _chunk_envelope(model: str, choices: list, usage: dict | None = None) -> dict:
    payload = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
    }
    if usage is not None:
        payload["usage"] = usage
    return payload


def _delta(model: str, delta: dict, finish_reason: str | None = None) -> dict:
    return _chunk_envelope(model, [{"index": 0, "delta": delta, "finish_reason": finish_reason}])


def _pieces(text: str, size: int) -> list[str]:
    size = max(1, size)
    return [text[i : i + size] for i in range(0, len(text), size)]


def _call_fragments(index: int, call: ScriptedCall, size: int) -> list[dict]:
    call_id = call.id or f"call_{uuid.uuid4().hex[:12]}"
    head = {"index": index, "id": call_id, "type": "function", "function": {"name": call.name, "arguments": ""}}
    parts = [{"index": index, "function": {"arguments": p}} for p in _pieces(call.arguments_text(), size)]
    return [head, *parts]


def _chunks(reply: Reply, model: str):
    yield _delta(model, {"role": "assistant", "content": ""})
    if reply.reasoning and reply.reasoning_as == "think":
        pieces = _pieces(f"<think>{reply.reasoning}</think>\n\n", reply.chunk_size)
        yield from (_delta(model, {"content": piece}) for piece in pieces)
    elif reply.reasoning:
        pieces = _pieces(reply.reasoning, reply.chunk_size)
        yield from (_delta(model, {"content": None, reply.reasoning_as: piece}) for piece in pieces)
    for piece in _pieces(reply.text, reply.chunk_size):
        yield _delta(model, {"content": piece})
    if reply.deltas is not None or reply.raw_chunks is not None:
        for delta in reply.deltas or ():
            yield _chunk_envelope(model, [{"index": 0, "delta": delta, "finish_reason": None}])
        yield from reply.raw_chunks or ()
        yield _delta(model, {}, finish_reason=reply.finish_reason or "stop")
        return
    per_call = [_call_fragments(i, c, reply.chunk_size * 2) for i, c in enumerate(reply.tool_calls)]
    if reply.interleave:
        ordered = []
        for step in range(max((len(f) for f in per_call), default=0)):
            ordered += [frags[step] for frags in per_call if step < len(frags)]
    else:
        ordered = [frag for frags in per_call for frag in frags]
    for fragment in ordered:
        yield _delta(model, {"tool_calls": [fragment]})
    yield _delta(model, {}, finish_reason=_finish_reason(reply))


def _finish_reason(reply: Reply) -> str:
    return reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")


# --- hostile answers, streamed without being built in memory (Reply.body) --------------------------
BLOCK_BYTES = 64 * 1024


def many_tool_calls_body(count: int, *, name: str = "tools__add", arguments: str = '{"a": 1, "b": 2}',
                         model: str = "fake-model") -> Callable[[], Iterator[bytes]]:
    """One answer asking for `count` tool calls (one fragment each), then `[DONE]`."""
    args = json.dumps(arguments)

    def body() -> Iterator[bytes]:
        head = ('data: {"id":"chatcmpl-fake","object":"chat.completion.chunk","model":%s,"choices":[{"index":0,'
                '"delta":{"tool_calls":[{"index":%d,"id":"call_%d","type":"function","function":{"name":%s,'
                '"arguments":%s}}]},"finish_reason":null}]}\n\n')
        model_json, name_json = json.dumps(model), json.dumps(name)
        block: list[str] = []
        size = 0
        for index in range(count):
            frame = head % (model_json, index, index, name_json, args)
            block.append(frame)
            size += len(frame)
            if size >= BLOCK_BYTES:
                yield "".join(block).encode()
                block, size = [], 0
        block.append("data: [DONE]\n\n")
        yield "".join(block).encode()

    return body


def huge_text_body(total_bytes: int, *, model: str = "fake-model") -> Callable[[], Iterator[bytes]]:
    """About `total_bytes` of model text in 64 KB chunks (one frame built once, sent again and
    again), then `[DONE]`."""

    def body() -> Iterator[bytes]:
        payload = _chunk_envelope(model, [{"index": 0, "delta": {"content": "啊" * (BLOCK_BYTES // 3)},
                                           "finish_reason": None}])
        frame = f"data: {json.dumps(payload, ensure_ascii=False)}\n\n".encode()
        for _ in range(max(total_bytes // len(frame), 1)):
            yield frame
        yield b"data: [DONE]\n\n"

    return body


def endless_line_body(total_bytes: int) -> Callable[[], Iterator[bytes]]:
    """One SSE line of `total_bytes` that never ends (no newline): a reader that buffers lines
    whole holds all of it."""

    def body() -> Iterator[bytes]:
        yield b'data: {"choices":[{"index":0,"delta":{"content":"'
        block = b"x" * BLOCK_BYTES
        for _ in range(max(total_bytes // BLOCK_BYTES, 1)):
            yield block

    return body


def _completion(reply: Reply, model: str) -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": c.id or f"call_{uuid.uuid4().hex[:12]}",
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments_text()},
            }
            for c in reply.tool_calls
        ]
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": _finish_reason(reply)}
        ],
        "usage": _usage(reply),
    }


# --- real providers' streams, recorded (streams/*.sse) -------------------------------------------
STREAMS_DIR = Path(__file__).resolve().parent / "streams"
CUT_DIRECTIVE = "cut-within:"


@dataclass(frozen=True)
class StreamFixture:
    """A provider's streamed answer as it came over the wire.

    The file `streams/NAME.sse` starts with a header of SSE comment lines (`: …`) up to the first
    empty line: where the shape comes from, and directives. The rest is the body, byte for byte.
    The body is written one SSE event per write (providers flush each event), and a directive
    `: cut-within: TEXT` also cuts it after the first byte of the first occurrence of TEXT, whose
    first character must take more than one byte in UTF-8: the write boundary then falls inside a
    character, as a proxy or a TCP segment can cut it. The header is not sent."""

    name: str
    header: tuple[str, ...]
    body: bytes
    pieces: tuple[bytes, ...]

    @property
    def events(self) -> list[str]:
        """The `data:` payloads of the body, in order (`[DONE]` included)."""
        return [e[len("data: "):] for e in self.body.decode().split("\n\n") if e.startswith("data: ")]


@cache
def stream_fixture(name: str) -> StreamFixture:
    """The recorded stream streams/NAME.sse (read once)."""
    raw = (STREAMS_DIR / f"{name}.sse").read_bytes()
    head, sep, body = raw.partition(b"\n\n")
    lines = head.decode().split("\n")
    if not sep or not all(line.startswith(":") for line in lines):
        raise ValueError(f"{name}.sse: the header is `:` comment lines, then an empty line, then the body")
    header = tuple(line[1:].strip() for line in lines)
    cuts = set(_event_ends(body))
    searched_from = 0
    for line in header:
        if not line.startswith(CUT_DIRECTIVE):
            continue
        needle = line[len(CUT_DIRECTIVE):].strip().encode()
        at = body.find(needle, searched_from)
        if at < 0 or needle[0] < 0x80:
            raise ValueError(f"{name}.sse: {line!r} does not start with a multi-byte character of the body")
        cuts.add(at + 1)
        searched_from = at + 1
    bounds = [0, *sorted(c for c in cuts if 0 < c < len(body)), len(body)]
    pieces = tuple(body[a:b] for a, b in zip(bounds, bounds[1:], strict=False))
    return StreamFixture(name=name, header=header, body=body, pieces=pieces)


def _event_ends(body: bytes) -> Iterator[int]:
    at = body.find(b"\n\n")
    while at >= 0:
        yield at + 2
        at = body.find(b"\n\n", at + 2)


def stream_replay(name: str, *, piece_bytes: int | None = None) -> Callable[[], Iterator[bytes]]:
    """A `Reply.body` that sends the recorded stream NAME in its recorded pieces; with
    `piece_bytes`, in pieces of that many bytes instead (cuts land anywhere, inside characters
    and SSE lines). The chunks' `id`, `model`, `created` … stay as recorded."""
    fixture = stream_fixture(name)
    if piece_bytes is None:
        pieces = fixture.pieces
    else:
        body = fixture.body
        pieces = tuple(body[i : i + piece_bytes] for i in range(0, len(body), max(1, piece_bytes)))
    return lambda: iter(pieces)


def stream_fixture_names() -> list[str]:
    return sorted(p.stem for p in STREAMS_DIR.glob("*.sse"))


# --- real providers' streams as they were recorded (streams/recorded/, SOURCES.md there) -----------
RECORDED_DIR = STREAMS_DIR / "recorded"


def recorded_stream_names() -> list[str]:
    """The recorded bodies, as `stream_fixture` names (`recorded/<file stem>`)."""
    return sorted(f"recorded/{p.stem}" for p in RECORDED_DIR.glob("*.sse"))


def recorded_payload_names() -> list[str]:
    """Recordings that kept each chunk's JSON but not its SSE framing (recorded/payload_only/)."""
    return sorted(p.name.removesuffix(".chunks.txt") for p in (RECORDED_DIR / "payload_only").glob("*.chunks.txt"))


def payload_stream(name: str, *, spaced: bool = True) -> bytes:
    """The recorded chunks of payload_only/NAME.chunks.txt, one per line and not changed, framed
    as an SSE body: `data: {…}` — or, with `spaced=False`, `data:{…}` without the space — then
    `[DONE]` the same way. The framing is ours (the recording dropped it); the chunks are not."""
    prefix = b"data: " if spaced else b"data:"
    lines = (RECORDED_DIR / "payload_only" / f"{name}.chunks.txt").read_bytes().splitlines()
    return b"".join(prefix + line + b"\n\n" for line in lines if line.strip()) + prefix + b"[DONE]\n\n"


def body_pieces(body: bytes, piece_bytes: int) -> Callable[[], Iterator[bytes]]:
    """A `Reply.body` that sends `body` in writes of `piece_bytes` (cutting characters and lines)."""
    pieces = tuple(body[i : i + piece_bytes] for i in range(0, len(body), max(1, piece_bytes)))
    return lambda: iter(pieces)
