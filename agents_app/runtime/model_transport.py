"""The model client's HTTP: the openai SDK's own aiohttp client (`openai[aiohttp]`,
`openai.DefaultAioHttpClient`), so that a model's stream is read by aiohttp's C parser and
connection pool instead of five pure-Python layers (httpx2 → httpcore2 → h11 → anyio).

Why (docs/runtime.md#the-models-http-client): reading the model's stream was a fifth of a burst's
CPU. Opening and reading a 32-chunk stream costs this process 0.71× the CPU it does through the
SDK's default (httpx2) client at one stream and 0.76× at 32 at once (bench/llm_read.py). The SDK still
builds and sends every request and maps every status and transport error to its own exceptions
(agents_app/tests/test_llm_contract.py); aiohttp's pool keeps its idle connections per host and
finds one without scanning every connection it holds (why the pools used to be sharded by hand).

The body's end is announced: `response.extensions[BODY_COMPLETE]` waits until the whole body has
arrived (aiohttp's payload at its end), so the reader, pausing between reads to take several
chunks a pass (llm.READ_GAP_SEC), reads a finished answer at once instead of a pause later.

One correction: the SDK's adapter maps aiohttp's errors to httpx's by class, and its table makes
every `aiohttp.ClientConnectionError` a `ConnectTimeout` — a refused connection, or a server that
hung up, would read as a timeout ("the model is slow" where it is down). `_ErrorsNamed` names
them as httpx's own transport does: a timeout only when aiohttp's error was one.
"""
from __future__ import annotations

import asyncio
import functools
import ssl
from collections.abc import AsyncIterator

import aiohttp
import httpx2
import openai
from django.conf import settings

from campus_agent.base.tasks import background

# The response extension holding `async () -> None`, returning once the body has wholly arrived.
BODY_COMPLETE = "campus_agent.body_complete"
# After a provider's settings change, its old client is closed this long after the last turn
# could have started reading through it (the turn's budget), so no stream is cut.
CLOSE_AFTER_BUDGET_SEC = 60.0


def model_http_client(*, timeout: float) -> openai.DefaultAioHttpClient:
    """The http client of one model client: the SDK's aiohttp client and defaults (1,000
    connections, as its httpx client), one TLS context for all of them."""
    return _ModelHttpClient(timeout=timeout, verify=_ssl_context())


def model_http_client_retire(client: openai.AsyncOpenAI) -> None:
    """Closes a model client that a provider's change replaced, once no turn can be reading
    through it any more (dropped unclosed, aiohttp would log its open session as an error)."""
    delay = settings.TURN_BUDGET_SEC + CLOSE_AFTER_BUDGET_SEC
    asyncio.get_running_loop().call_later(delay, lambda: background(client.close()))


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    # Building one loads the CA bundle (milliseconds, and memory): once per process.
    return httpx2.create_ssl_context()


class _ModelHttpClient(openai.DefaultAioHttpClient):
    # httpx's extension points, the ones the SDK's own adapter overrides to put aiohttp in.
    def _init_transport(self, *args, **kwargs) -> httpx2.AsyncBaseTransport:
        return _ErrorsNamed(super()._init_transport(*args, **kwargs))

    def _init_proxy_transport(self, *args, **kwargs) -> httpx2.AsyncBaseTransport:
        return _ErrorsNamed(super()._init_proxy_transport(*args, **kwargs))


def _named(exc: httpx2.TransportError, *, request: httpx2.Request | None = None) -> httpx2.TransportError:
    """httpx's name for what aiohttp raised (`exc.__cause__`): the error itself when it is right.
    `request`: while sending (a failure to connect); None while reading the body."""
    cause = exc.__cause__
    if not isinstance(exc, httpx2.TimeoutException) or cause is None or isinstance(cause, TimeoutError):
        return exc
    message = str(cause) or type(cause).__name__
    if isinstance(cause, aiohttp.ServerDisconnectedError):
        return httpx2.RemoteProtocolError(message, request=request)
    if request is None:
        return httpx2.ReadError(message)
    return httpx2.ConnectError(message, request=request)


class _ErrorsNamed(httpx2.AsyncBaseTransport):
    """The SDK's aiohttp transport, its misnamed timeouts named for what they were."""

    def __init__(self, transport: httpx2.AsyncBaseTransport) -> None:
        self._transport = transport

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        try:
            response = await self._transport.handle_async_request(request)
        except httpx2.TransportError as exc:
            named = _named(exc, request=request)
            if named is exc:
                raise
            raise named from exc.__cause__
        # The SDK's adapter keeps aiohttp's response on its body stream (`_aiohttp_response`); a
        # later adapter without it leaves the extension out, and the reader pauses as before
        # (agents_app/tests/test_model_transport.py fails then).
        aiohttp_response = getattr(response.stream, "_aiohttp_response", None)
        if aiohttp_response is not None:
            response.extensions[BODY_COMPLETE] = aiohttp_response.content.wait_eof
        response.stream = _BodyErrorsNamed(response.stream)
        return response

    async def aclose(self) -> None:
        await self._transport.aclose()


class _BodyErrorsNamed(httpx2.AsyncByteStream):
    def __init__(self, stream: httpx2.AsyncByteStream) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for piece in self._stream:
                yield piece
        except httpx2.TransportError as exc:
            named = _named(exc)
            if named is exc:
                raise
            raise named from exc.__cause__

    async def aclose(self) -> None:
        await self._stream.aclose()
