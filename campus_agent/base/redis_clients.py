"""The worker's asyncio Redis clients (REDIS_URL): connection pools per process and event loop.

redis-py's asyncio connections belong to the loop that opened them (tests run several loops in
one process). The run bus (chat_app.runs) and the slot leases (chat_app.runs.lease) share them.

Both pools wait for a free connection (up to REDIS_POOL_WAIT_SEC) instead of failing: redis-py's
default pool raises `MaxConnectionsError` the moment more commands are in flight than it has
connections, and a burst of 1,000 turns on one worker answered 774 of them with HTTP 500
(bench/stream_overhead.py --burst, docs/benchmarks.md). The followers' blocking reads (`XREAD
BLOCK`, up to 4 s each) have a pool of their own, so that streams followed on this worker never
hold the connections admission and the frames' copies need.
"""
import asyncio
import weakref

from django.conf import settings
from redis.asyncio import BlockingConnectionPool, Redis

_clients: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, bool], Redis]]" = (
    weakref.WeakKeyDictionary()
)


def redis_client(url: str | None = None, *, reads: bool = False) -> Redis | None:
    """This loop's client for `url` (default REDIS_URL), or None without one (the embedded,
    single-worker mode). `reads`: the pool for blocking reads (REDIS_MAX_READ_CONNECTIONS)
    instead of the one for commands (REDIS_MAX_CONNECTIONS)."""
    url = url or settings.REDIS_URL
    if not url:
        return None
    per_loop = _clients.setdefault(asyncio.get_running_loop(), {})
    client = per_loop.get((url, reads))
    if client is None:
        size = settings.REDIS_MAX_READ_CONNECTIONS if reads else settings.REDIS_MAX_CONNECTIONS
        pool = BlockingConnectionPool.from_url(url, decode_responses=True, max_connections=size,
                                               timeout=settings.REDIS_POOL_WAIT_SEC)
        client = per_loop[(url, reads)] = Redis(connection_pool=pool)
    return client
