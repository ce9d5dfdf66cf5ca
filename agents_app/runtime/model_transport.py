"""The model client's connections, kept in several small pools instead of one large one.

httpcore's connection pool looks at every connection it holds, and at every request in flight,
each time a request starts and each time a response is closed (`_assign_requests_to_connections`):
a few microseconds per connection, so with 1,000 streams open a turn paid milliseconds of CPU in
that scan to open its model request and again to close it, the cost growing with the square of
a burst (docs/benchmarks.md, "The model's connections in shards"). Here the connections of one
client are spread over shards of at most SHARD_STREAMS each; a request goes to the first shard
with room, so a quiet worker uses the first shard only, as one pool would, and reuses its
kept-alive connections. The total stays the SDK's own: at most 1,000 connections and about 100
kept alive.

Each shard is httpx's own transport: the SDK builds, sends and maps the errors of every request
as before (agents_app/tests/test_llm_contract.py); only the choice of pool is made here.
"""
from __future__ import annotations

import functools
import math
import ssl

import httpx2
import openai

SHARD_STREAMS = 32
MAX_CONNECTIONS = 1000  # the openai SDK's DEFAULT_CONNECTION_LIMITS
MAX_KEEPALIVE = 100
KEEPALIVE_EXPIRY_SEC = 5.0  # httpx's default


class ShardedTransport(httpx2.AsyncBaseTransport):
    """An httpx transport over up to ceil(max_connections / shard_streams) connection pools,
    each made when first needed. A request takes the first pool with fewer than `shard_streams`
    requests in flight (sent, response not yet closed); when all are full, the least busy one,
    where it waits for a connection as it would have in one full pool."""

    def __init__(self, *, shard_streams: int = SHARD_STREAMS, max_connections: int = MAX_CONNECTIONS,
                 max_keepalive: int = MAX_KEEPALIVE, ssl_context: ssl.SSLContext | None = None) -> None:
        self._shard_streams = shard_streams
        self._max_shards = max(1, math.ceil(max_connections / shard_streams))
        self._limits = httpx2.Limits(
            max_connections=shard_streams,
            max_keepalive_connections=max(1, math.ceil(max_keepalive / self._max_shards)),
            keepalive_expiry=KEEPALIVE_EXPIRY_SEC,
        )
        # One context for all shards: building one loads the CA bundle (milliseconds, and memory).
        self._ssl_context = ssl_context or _ssl_context()
        self._shards: list[httpx2.AsyncHTTPTransport] = []
        self._in_flight: list[int] = []

    @property
    def in_flight(self) -> tuple[int, ...]:
        """Requests in flight per shard (the tests)."""
        return tuple(self._in_flight)

    def _shard_pick(self) -> int:
        for index, busy in enumerate(self._in_flight):
            if busy < self._shard_streams:
                return index
        if len(self._shards) < self._max_shards:
            self._shards.append(httpx2.AsyncHTTPTransport(verify=self._ssl_context, limits=self._limits))
            self._in_flight.append(0)
            return len(self._shards) - 1
        return min(range(len(self._in_flight)), key=self._in_flight.__getitem__)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        index = self._shard_pick()
        self._in_flight[index] += 1
        try:
            response = await self._shards[index].handle_async_request(request)
        except BaseException:
            self._in_flight[index] -= 1
            raise
        response.stream = _Released(response.stream, self, index)
        return response

    def _release(self, index: int) -> None:
        self._in_flight[index] -= 1

    async def aclose(self) -> None:
        for shard in self._shards:
            await shard.aclose()


def model_http_client(*, timeout: float) -> openai.DefaultAsyncHttpxClient:
    """The http client of one model client: the SDK's own defaults over sharded pools."""
    return openai.DefaultAsyncHttpxClient(transport=ShardedTransport(), timeout=timeout)


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    return httpx2.create_ssl_context()


class _Released(httpx2.AsyncByteStream):
    """A response body that gives its shard's place back when it is closed. Reading goes straight
    to the shard's own stream (no extra layer per read)."""

    def __init__(self, stream: httpx2.AsyncByteStream, transport: ShardedTransport, index: int) -> None:
        self._stream = stream
        self._transport: ShardedTransport | None = transport
        self._index = index

    def __aiter__(self):
        return self._stream.__aiter__()

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()
        finally:
            if self._transport is not None:
                self._transport._release(self._index)
                self._transport = None
