"""The main agent's model: one reused AsyncOpenAI client per provider, one streamed request.

A new client per call costs a TLS handshake and a connection pool each time (seconds under
load), so clients are kept per provider and per event loop (an httpx pool belongs to the loop
that opened its connections); a provider's client is rebuilt when its endpoint, key, timeout or
row (`version`: its `updated_at`) changed, so an admin edit applies to the next request.
Which provider, retries and fallbacks: providers.py.
"""
from __future__ import annotations

import asyncio
import json
import ssl
import weakref
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, suppress
from dataclasses import dataclass, field

import anyio
import httpx
import httpx2
import httpx_sse
import openai
from django.conf import settings

from agents_app.runtime.model_transport import BODY_COMPLETE, model_http_client, model_http_client_retire
from agents_app.runtime.reasoning import delta_reasoning
from campus_agent.base.request_id import HEADER

DRAIN_SEC = 0.1
# Once text flows, the body is read at most this often: what arrived meanwhile is parsed in one
# pass through the HTTP stack (httpx, httpcore, h11, anyio: most of a turn's CPU is there, per
# read, not per byte). The first text is read at once; the chat stream coalesces its frames at
# 25 ms anyway (chat_app.runs.engine), so nobody sees the pause. docs/benchmarks.md.
READ_GAP_SEC = 0.02
BUFFERED_SEC = 0.001  # a piece that came this fast was already buffered
STREAM_ERROR_MESSAGE = "An error occurred during streaming"  # the SDK's text for a bare error chunk
STREAM_BAD_JSON_MESSAGE = "The model stream sent an event that is not JSON"
# What reading the body can raise below the SDK (the SDK's own list, openai._httpx2, is private).
_TRANSPORT_ERRORS = (httpx2.RequestError, httpx.RequestError, ssl.SSLError, anyio.EndOfStream)


class ReplyTooLong(Exception):
    """The model sent more than the turn may read (settings.LLM_MAX_REPLY_BYTES): the stream is cut."""


def llm_base_url_normalise(url: str) -> str:
    """Strip the trailing `/`, append `/v1` unless the path already ends so (any case)."""
    base = (url or "").strip().rstrip("/")
    return base if base.lower().endswith("/v1") else f"{base}/v1"


@dataclass(frozen=True, slots=True)
class LlmProvider:
    """Where a model is asked: what a client is built from. The default provider (settings.LLM_*)
    is one of these too, not a row (`llm_default_provider`). The key is left out of its repr."""

    name: str
    base_url: str
    api_key: str = field(repr=False)
    timeout: float
    slot: str = "default"  # one cached client per slot ("default", "provider:<id>")
    version: str = ""  # the row's updated_at


DEFAULT_PROVIDER_NAME = "default"


def llm_default_provider() -> LlmProvider:
    """The provider configured by settings.LLM_* (an agent without a provider uses it)."""
    return LlmProvider(name=DEFAULT_PROVIDER_NAME, base_url=settings.LLM_BASE_URL, api_key=settings.LLM_API_KEY,
                       timeout=float(settings.LLM_TIMEOUT))


_clients: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[str, tuple[tuple, openai.AsyncOpenAI]]
] = weakref.WeakKeyDictionary()


def llm_client(provider: LlmProvider | None = None) -> openai.AsyncOpenAI:
    """The client for `provider` (default: settings.LLM_*), created once and reused."""
    provider = provider or llm_default_provider()
    key = (llm_base_url_normalise(provider.base_url), provider.api_key, float(provider.timeout), provider.version)
    per_loop = _clients.setdefault(asyncio.get_running_loop(), {})
    cached = per_loop.get(provider.slot)
    if cached is not None and cached[0] == key:
        return cached[1]
    # A changed provider gets a new client; the old one is closed later, when no stream can still
    # be reading through it.
    if cached is not None:
        model_http_client_retire(cached[1])
    client = openai.AsyncOpenAI(
        base_url=key[0],
        api_key=key[1] or "not-set",
        timeout=key[2],
        # No SDK retries: providers.py retries before the first token only (a retried stream
        # could repeat text the user already saw), within the turn's budget.
        max_retries=0,
        http_client=model_http_client(timeout=key[2]),
    )
    per_loop[provider.slot] = (key, client)
    return client


class LlmStream:
    """The streamed body of one chat completion, read as plain dicts (`json.loads` of each event).

    The SDK still builds and sends the request and maps HTTP statuses to `openai.APIStatusError`;
    only the body is read here, because the SDK's per-chunk pydantic models cost CPU that adds up
    in a worker holding many streams (measured: 5.8 → 3.0 ms CPU for a 26-chunk stream, 64 at
    once). Failures are raised as the SDK raises them (`openai.APIError` and subclasses: an
    `error` chunk, a timeout, a dropped connection), so callers handle one family of errors.
    agents_app/tests/test_llm_contract.py runs each failure through this reader and through the
    plain SDK and holds them to the same outcome; it differs only where the SDK lets a non-SDK
    error escape or hides a failure: a chunk that is not JSON raises `openai.APIError` (the SDK:
    `json.JSONDecodeError`), a 200 answer that is not an event stream raises `openai.APIError`
    (the SDK: an empty answer), an event without data is skipped (the SDK: a JSON error), and
    vLLM's error object (`{"object": "error", …}`) raises (the SDK: an empty chunk).

    Iterate it for the chunk dicts (usage in the last one); `close()` releases the connection and
    must be called on every exit path (iteration does not close it).
    """

    def __init__(self, *, response: openai.AsyncAPIResponse, exits: AsyncExitStack, read_gap: float = 0.0,
                 max_bytes: int | None = None):
        self._response = response
        self._exits = exits
        self._body = _PacedBody(response.http_response, read_gap, max_bytes)
        self._chunks = self._read()

    def __aiter__(self) -> LlmStream:
        return self

    async def __anext__(self) -> dict:
        return await self._chunks.__anext__()

    @property
    def received(self) -> int:
        """Bytes of the body read so far (what counts against LLM_MAX_REPLY_BYTES)."""
        return self._body.received

    async def close(self) -> None:
        try:
            await self._chunks.aclose()
        finally:
            await self._exits.aclose()

    async def _read(self) -> AsyncIterator[dict]:
        request = self._response.http_request
        # httpx-sse parses per the SSE spec: `data:` with or without the space, CR/LF/CRLF,
        # comment lines, multi-line data. It only needs `.headers` and `.aiter_text()`, which the
        # SDK's httpx2 response has.
        events = httpx_sse.EventSource(self._body).aiter_sse()
        try:
            async for event in events:
                if event.data.startswith("[DONE]"):
                    await _drain(events)
                    return
                if not event.data:
                    continue
                try:
                    chunk = json.loads(event.data)
                except (ValueError, RecursionError) as exc:  # RecursionError: nested too deep
                    raise openai.APIError(STREAM_BAD_JSON_MESSAGE, request, body=event.data) from exc
                if not isinstance(chunk, dict):
                    continue
                if chunk.get("error") or chunk.get("object") == "error":
                    # As the SDK does: an error reported inside a 200 stream (vLLM's own shape:
                    # {"object": "error", "message": …}). OpenRouter reports what the failed
                    # answer cost in the same chunk: that usage is handed on first.
                    if usage := chunk_usage(chunk):
                        yield {"usage": usage}
                    error = chunk.get("error") or chunk
                    message = error.get("message") if isinstance(error, dict) else None
                    raise openai.APIError(message if isinstance(message, str) and message else STREAM_ERROR_MESSAGE,
                                          request, body=error)
                if _finishes(chunk):
                    # The answer is complete: what is left (the usage chunk, [DONE]) follows at once
                    # and is read as it comes; a pause here would only delay the end.
                    self._body.pacing = False
                elif not self._body.pacing and _carries_output(chunk):
                    self._body.pacing = True
                yield chunk
        except httpx_sse.SSEError as exc:  # not text/event-stream: e.g. an error body with status 200
            raise openai.APIError(f"The model did not answer with an event stream: {exc}", request,
                                  body=None) from exc
        except (httpx2.TimeoutException, httpx.TimeoutException) as exc:
            raise openai.APITimeoutError(request=request) from exc
        except _TRANSPORT_ERRORS as exc:
            raise openai.APIConnectionError(request=request) from exc
        finally:
            await events.aclose()


def chunk_usage(chunk: dict) -> dict | None:
    """The usage a chunk reports: its `usage` (OpenAI's place, with `stream_options.include_usage`),
    or Groq's `x_groq.usage` (where Groq puts it, on the last chunk); None when it has none."""
    usage = chunk.get("usage")
    if isinstance(usage, dict):
        return usage
    groq = chunk.get("x_groq")
    usage = groq.get("usage") if isinstance(groq, dict) else None
    return usage if isinstance(usage, dict) else None


def _choices(chunk: dict) -> list:
    choices = chunk.get("choices")
    return choices if isinstance(choices, list) else []  # a hostile model's number or text: none


def _finishes(chunk: dict) -> bool:
    return any(isinstance(choice, dict) and choice.get("finish_reason") for choice in _choices(chunk))


def _carries_output(chunk: dict) -> bool:
    for choice in _choices(chunk):
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if isinstance(delta, dict) and (delta.get("content") or delta.get("tool_calls") or delta.get("refusal")
                                        or delta_reasoning(delta)):
            return True
    return False


class _PacedBody:
    """The response as httpx-sse reads it (`headers`, `aiter_text`). Once `pacing` is on, a piece
    that had to wait for the network is followed by a pause until READ_GAP_SEC after it arrived,
    or until the whole body is there, whichever comes first; pieces already buffered (several HTTP
    chunks come in one socket read) follow without one, so the reader never falls behind the model.

    With `max_bytes`, a body longer than that raises ReplyTooLong as soon as it is read past it:
    no line, event or text longer than the cap is ever held (httpx-sse buffers a line whole)."""

    def __init__(self, http, gap: float, max_bytes: int | None = None) -> None:
        self._http = http
        self._gap = gap
        self._max_bytes = max_bytes
        self.pacing = False
        self.reads = 0  # pieces that waited for the network (the tests)
        self.received = 0

    @property
    def headers(self):
        return self._http.headers

    async def _pause(self, seconds: float) -> None:
        """Waits `seconds`, or less when the whole body arrives meanwhile: the answer's end
        (its last text, the finish, usage, [DONE]) is read as soon as it is all there, not a
        pause later (model_transport.BODY_COMPLETE)."""
        complete = self._http.extensions.get(BODY_COMPLETE)
        if complete is None:
            await asyncio.sleep(seconds)
            return
        # A timeout ends the pause; a body that broke off ends it too, and the next read raises
        # that as the transport names it.
        with suppress(Exception):
            async with asyncio.timeout(seconds):
                await complete()

    async def aiter_text(self) -> AsyncIterator[str]:
        loop = asyncio.get_running_loop()
        asked = loop.time()
        async for text in self._http.aiter_text():
            self.received += len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
            if self._max_bytes is not None and self.received > self._max_bytes:
                raise ReplyTooLong(f"the model sent more than {self._max_bytes} bytes")
            received = loop.time()
            waited = received - asked > BUFFERED_SEC
            self.reads += waited
            yield text
            if waited and self.pacing and self._gap > 0:
                pause = received + self._gap - loop.time()
                if pause > 0:
                    await self._pause(pause)
            asked = loop.time()


async def _drain(events: AsyncIterator) -> None:
    """Reads the little left after `[DONE]` (the chunked terminator), so that HTTP/1.1 puts the
    connection back in the pool instead of closing it; a server that keeps sending is cut off."""
    try:
        async with asyncio.timeout(DRAIN_SEC):
            async for _ in events:
                pass
    except (TimeoutError, *_TRANSPORT_ERRORS, httpx2.StreamError):
        pass  # the answer is complete; the connection is closed instead of reused


async def llm_stream(*, model: str, messages: list[dict], tools: list[dict] | None, temperature: float,
                     request_id: str, max_bytes: int | None = None, provider: LlmProvider | None = None,
                     options: dict | None = None) -> LlmStream:
    """Opens one streamed chat completion with `provider` (default: settings.LLM_*); `options`
    are further request fields (the thinking switch: `extra_body`, `reasoning_effort`). Raises
    the SDK's errors, e.g. `openai.APIStatusError`."""
    kwargs = dict(options or {})
    # The messages and tools go in the SDK's `extra_body`, merged into the JSON as they are,
    # instead of its typed arguments: those the SDK walks against its TypedDicts for aliases and
    # file fields the chat request has none of (test_llm_client.py holds that the walk gives back
    # what went in, for every shape a turn sends), and that walk was 60 % of opening and reading a
    # model stream: 2.5 → 0.9 ms CPU for 11 messages and 6 tools (docs/benchmarks.md).
    body = {"messages": messages, **(kwargs.pop("extra_body", None) or {})}
    if tools:
        body.update(tools=tools, tool_choice="auto")
    exits = AsyncExitStack()
    # with_streaming_response: the SDK sends the request and checks the status, but hands back
    # the raw response instead of parsing it into models.
    response = await exits.enter_async_context(llm_client(provider).chat.completions.with_streaming_response.create(
        model=model,
        messages=(),  # replaced by body["messages"]
        extra_body=body,
        temperature=temperature,
        max_tokens=settings.LLM_MAX_TOKENS,
        stream=True,
        stream_options={"include_usage": True},
        extra_headers={HEADER: request_id},
        **kwargs,
    ))
    return LlmStream(response=response, exits=exits, read_gap=READ_GAP_SEC, max_bytes=max_bytes)
