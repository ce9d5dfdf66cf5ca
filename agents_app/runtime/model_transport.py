"""The model client's connections, kept in several small pools instead of one large one.

httpcore's connection pool looks at every connection it holds, and at every request in flight,
each time a request starts and each time a response is closed (`_assign_requests_to_connections`):
a few microseconds per connection, so with 1,000 streams open a turn paid milliseconds of CPU in
that scan to open its model request and again to close it, the cost growing with the square of
a burst (docs/log.md, 3 December 2026, "the model's connections in shards"). Here the connections of one
client are spread over shards of at most SHARD_STREAMS each; a request goes to the first shard
with room, so a quiet worker uses the first shard only, as one pool would, and reuses its
kept-alive connections. At most 32 pools of 32 connections: the SDK's own limit of 1,000, near
enough (1,024).

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
KEEPALIVE_EXPIRY_SEC = 5.0  # httpx's default


class ShardedTransport(httpx2.AsyncBaseTransport):
    """An httpx transport over up to ceil(max_connections / shard_streams) connection pools.
    A request takes the first pool with fewer than `shard_streams` requests in flight (sent,
    response not yet closed); when all are full, the least busy one, where it waits for a
    connection as it would have in one full pool. A pool may keep all its connections alive, as
    one pool of the SDK's keeps up to 100; the first pool stays, a pool above it is made when
    needed and closed, with its idle connections, when its last request ends, so that what a
    burst opened does not outlive it."""

    def __init__(self, *, shard_streams: int = SHARD_STREAMS, max_connections: int = MAX_CONNECTIONS,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self._shard_streams = shard_streams
        self._max_shards = max(1, math.ceil(max_connections / shard_streams))
        self._limits = httpx2.Limits(max_connections=shard_streams, max_keepalive_connections=shard_streams,
                                     keepalive_expiry=KEEPALIVE_EXPIRY_SEC)
        # One context for all pools: building one loads the CA bundle (milliseconds, and memory).
        self._ssl_context = ssl_context or _ssl_context()
        self._shards: list[httpx2.AsyncHTTPTransport | None] = []
        self._in_flight: list[int] = []

    @property
    def in_flight(self) -> tuple[int, ...]:
        """Requests in flight per pool (the tests)."""
        return tuple(self._in_flight)

    @property
    def pools_open(self) -> int:
        return sum(shard is not None for shard in self._shards)

    def _pool(self) -> httpx2.AsyncHTTPTransport:
        return httpx2.AsyncHTTPTransport(verify=self._ssl_context, limits=self._limits)

    def _shard_pick(self) -> int:
        for index, busy in enumerate(self._in_flight):
            if busy < self._shard_streams:
                if self._shards[index] is None:
                    self._shards[index] = self._pool()
                return index
        if len(self._shards) < self._max_shards:
            self._shards.append(self._pool())
            self._in_flight.append(0)
            return len(self._shards) - 1
        return min(range(len(self._in_flight)), key=self._in_flight.__getitem__)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        index = self._shard_pick()
        self._in_flight[index] += 1
        try:
            response = await self._shards[index].handle_async_request(request)
        except BaseException:
            await self._release(index)
            raise
        response.stream = _Released(response.stream, self, index)
        return response

    async def _release(self, index: int) -> None:
        self._in_flight[index] -= 1
        shard = self._shards[index]
        if index and not self._in_flight[index] and shard is not None:
            self._shards[index] = None  # the next request past the first pool makes a new one
            try:
                await shard.aclose()  # only idle connections are left in it
            except Exception:  # noqa: BLE001 - closing idle sockets must not fail the answer that ended
                pass

    async def aclose(self) -> None:
        for shard in self._shards:
            if shard is not None:
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
            transport, self._transport = self._transport, None
            if transport is not None:
                await transport._release(self._index)
