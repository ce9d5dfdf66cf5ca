"""Per-user stream limits: concurrent streams and messages per minute (DESIGN §7), 429 past them.

Concurrency is counted twice, on purpose:

- in process, a dict under a lock: exact for one worker, no I/O, and it refuses before the
  cache is asked;
- in the Django cache, as leased slots (`add` of key `…:<slot>` is atomic in every backend;
  the lease expires after the turn budget plus a margin, so a crashed worker cannot hold a slot
  forever). With a shared cache (Redis, database) this makes the limit hold across workers;
  with the default local-memory cache it repeats the in-process count at the cost of a dict
  operation.

The rate is a one-minute window per user in the cache (`add` then `incr`, both atomic). The
window opens with the user's first counted message (the key's expiry), not on the clock's minute:
a bucket keyed on `time() // 60` reset the count whenever a minute boundary fell between two
messages, which let a burst through and made the limit depend on when it was measured.

The sync functions run inside the one thread hop that also authenticates and stores the user
message (services/admission.py), and the slot is given back in the hop that stores the reply, so
limits cost no extra crossing of the async boundary. With the Redis cache, a caller the stream
already knows takes and gives back its slot in the event loop instead (`astream_…`, the asyncio
client): no hop, no second connection pool.
"""
import asyncio
import threading
import uuid
import weakref
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import DEFAULT_CACHE_ALIAS, cache, caches
from loguru import logger
from redis.exceptions import RedisError

LEASE_MARGIN_SEC = 30
RATE_WINDOW_SEC = 60
_local_streams: dict[int, int] = {}
_local_lock = threading.Lock()


@dataclass
class StreamSlot:
    user_id: int
    cache_key: str | None = None
    released: bool = False
    release_async: bool = False  # taken in the event loop: give it back there (astream_slot_release)


def local_stream_count(*, user_id: int) -> int:
    return _local_streams.get(user_id, 0)


def _slot_key(user_id: int, slot: int) -> str:
    return f"chat:streams:{user_id}:{slot}"


def _local_take(user_id: int, limit: int) -> bool:
    with _local_lock:
        if _local_streams.get(user_id, 0) >= limit:
            return False
        _local_streams[user_id] = _local_streams.get(user_id, 0) + 1
        return True


def _local_decrement(user_id: int) -> None:  # caller holds _local_lock
    left = _local_streams.get(user_id, 0) - 1
    if left > 0:
        _local_streams[user_id] = left
    else:
        _local_streams.pop(user_id, None)


def _local_give_back(user_id: int) -> None:
    with _local_lock:
        _local_decrement(user_id)


def stream_slot_acquire(*, user_id: int) -> StreamSlot | None:
    """A slot for one more stream of this user, or None when CHAT_MAX_CONCURRENT_STREAMS are open."""
    limit = settings.CHAT_MAX_CONCURRENT_STREAMS
    if not _local_take(user_id, limit):
        return None
    slot = StreamSlot(user_id=user_id)
    ttl = int(settings.TURN_BUDGET_SEC) + LEASE_MARGIN_SEC
    owner = uuid.uuid4().hex
    try:
        slot.cache_key = next((k for k in (_slot_key(user_id, i) for i in range(limit)) if cache.add(k, owner, ttl)), None)
    except BaseException:
        _local_give_back(user_id)
        raise
    if slot.cache_key is None:
        _local_give_back(user_id)
        return None
    return slot


def _slot_mark_released(slot: StreamSlot) -> bool:
    """Marks the slot given back in this process; False when it already was (two threads may race)."""
    with _local_lock:
        if slot.released:
            return False
        slot.released = True
        _local_decrement(slot.user_id)
        return True


def stream_slot_release(*, slot: StreamSlot) -> None:
    """Idempotent, and safe when two threads race to release the same slot."""
    if not _slot_mark_released(slot):
        return
    if slot.cache_key:
        cache.delete(slot.cache_key)


def message_rate_allow(*, user_id: int) -> bool:
    """Counts this message in the user's open window; False past CHAT_RATE_PER_MINUTE."""
    key = f"chat:rate:{user_id}"
    cache.add(key, 0, RATE_WINDOW_SEC)  # only the first message of a window sets the expiry
    try:
        count = cache.incr(key)
    except ValueError:  # the window expired between add and incr: a fresh one
        cache.add(key, 1, RATE_WINDOW_SEC)
        count = 1
    return count <= settings.CHAT_RATE_PER_MINUTE


# With the Redis cache, the slot lease and the rate window are taken in one round trip: a script
# runs the same steps as the cache calls above (SET NX EX per slot key, then INCR + EXPIRE on
# the window's first message) atomically on the server. Through Django's cache API they cost four
# round trips (add; add, exists, incr), all before the first chunk (docs/benchmarks.md).
# The slot keys are `<prefix><i>`, built by the script: their number (the limit) costs nothing
# on our side. A single Redis, not a cluster (the keys are not declared).
_TAKE_SCRIPT = """
local slot = -1
for i = 0, tonumber(ARGV[2]) - 1 do
  if redis.call('SET', ARGV[1] .. i, ARGV[3], 'NX', 'EX', ARGV[4]) then slot = i; break end
end
if slot < 0 then return {-1, 0} end
local count = redis.call('INCR', KEYS[1])
if count == 1 then redis.call('EXPIRE', KEYS[1], ARGV[5]) end
return {slot, count}
"""


def _redis_cache():
    """Django's Redis cache when it is the cache and its keys are `<prefix><key>` (the default
    key function, which the script's slot keys follow); else None (the cache calls are used)."""
    from django.core.cache.backends.redis import RedisCache

    # The backend itself: `cache` is a proxy, never an instance of a backend class (checked on
    # the proxy, this was always false, and the script below never ran before issue #11).
    backend = caches[DEFAULT_CACHE_ALIAS]
    if not isinstance(backend, RedisCache):
        return None
    probe = _slot_key(0, 0)
    return backend if backend.make_key(probe) == backend.make_key(probe[:-1]) + "0" else None


def _take_args(user_id: int) -> tuple[list[str], list]:
    keys = [cache.make_and_validate_key(f"chat:rate:{user_id}")]
    prefix = cache.make_and_validate_key(_slot_key(user_id, 0))[:-1]
    args = [prefix, settings.CHAT_MAX_CONCURRENT_STREAMS, uuid.uuid4().hex,
            int(settings.TURN_BUDGET_SEC) + LEASE_MARGIN_SEC, RATE_WINDOW_SEC]
    return keys, args


def _taken(slot: StreamSlot, index, count) -> tuple[StreamSlot | None, bool]:
    if int(index) < 0:
        _local_give_back(slot.user_id)
        return None, False
    slot.cache_key = _slot_key(slot.user_id, int(index))  # released with cache.delete, which adds the prefix
    return slot, int(count) <= settings.CHAT_RATE_PER_MINUTE


def stream_slot_and_rate_take(*, user_id: int) -> tuple[StreamSlot | None, bool]:
    """`stream_slot_acquire` then `message_rate_allow`, in one Redis round trip when the cache is
    Redis: (None, False) without a free slot; (slot, False) past the rate, the slot still held
    (the caller gives it back); (slot, True) admitted."""
    redis_cache = _redis_cache()
    if redis_cache is None:
        slot = stream_slot_acquire(user_id=user_id)
        return (slot, message_rate_allow(user_id=user_id)) if slot is not None else (None, False)
    if not _local_take(user_id, settings.CHAT_MAX_CONCURRENT_STREAMS):
        return None, False
    keys, args = _take_args(user_id)
    try:
        index, count = redis_cache._cache.get_client(write=True).eval(_TAKE_SCRIPT, len(keys), *keys, *args)
    except BaseException:
        _local_give_back(user_id)
        raise
    return _taken(StreamSlot(user_id=user_id), index, count)


# --- the same in the event loop, through the `redis` asyncio client -----------------------------
# The chat stream admits a caller it already knows (chat_app.auth_cache) without leaving the
# event loop for the limits: no thread hop, and the worker's one asyncio connection pool
# (chat_app.runs.redis_bus) instead of the sync client's second pool.

_async_scripts: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict]" = weakref.WeakKeyDictionary()


def _async_script(location: str):
    """This loop's registered take script on the cache's Redis (EVALSHA after the first call)."""
    from redis.asyncio import Redis

    from chat_app.runs.redis_bus import redis_client

    per_loop = _async_scripts.setdefault(asyncio.get_running_loop(), {})
    script = per_loop.get(location)
    if script is None:
        # The run bus's client when the cache is on the same Redis: one pool per worker.
        client = redis_client() if location == settings.REDIS_URL else Redis.from_url(location)
        script = per_loop[location] = (client, client.register_script(_TAKE_SCRIPT))
    return script


async def astream_slot_and_rate_take(*, user_id: int) -> tuple[StreamSlot | None, bool] | None:
    """See stream_slot_and_rate_take(). None when the cache is not Redis: the caller takes the
    limits in its database call instead (the local-memory cache needs no round trip)."""
    redis_cache = _redis_cache()
    if redis_cache is None:
        return None
    if not _local_take(user_id, settings.CHAT_MAX_CONCURRENT_STREAMS):
        return None, False
    slot = StreamSlot(user_id=user_id, release_async=True)
    keys, args = _take_args(user_id)
    try:
        _, script = _async_script(redis_cache._servers[0])
        index, count = await script(keys=keys, args=args)
    except BaseException:
        _local_give_back(user_id)
        raise
    return _taken(slot, index, count)


async def astream_slot_release(*, slot: StreamSlot) -> None:
    """See stream_slot_release(). A slot taken in the event loop is given back there; a Redis
    failure is logged, not raised (the lease expires on its own)."""
    if slot.released:
        return
    if not slot.release_async:  # taken through the sync cache client: give it back the same way
        from chat_app.asyncdb import db_call

        await db_call(stream_slot_release, slot=slot)
        return
    if not _slot_mark_released(slot):
        return
    if slot.cache_key:
        redis_cache = _redis_cache()
        try:
            client, _ = _async_script(redis_cache._servers[0])
            await client.delete(redis_cache.make_and_validate_key(slot.cache_key))
        except RedisError as exc:
            logger.warning("giving a stream slot back failed ({}); its lease expires on its own", exc)
