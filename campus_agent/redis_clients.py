"""The worker's asyncio Redis client (REDIS_URL): one connection pool per process and event loop.

redis-py's asyncio connections belong to the loop that opened them (tests run several loops in
one process). The run bus (chat_app.runs) and the slot leases (chat_app.limits) share it.
"""
import asyncio
import weakref

from django.conf import settings
from redis.asyncio import Redis

_clients: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Redis]" = weakref.WeakKeyDictionary()


def redis_client() -> Redis | None:
    """This loop's client, or None without REDIS_URL (the embedded, single-worker mode)."""
    if not settings.REDIS_URL:
        return None
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None:
        client = _clients[loop] = Redis.from_url(settings.REDIS_URL, decode_responses=True)
    return client
