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

These functions are sync: the stream view calls them inside the one thread hop that also
authenticates and stores the user message (services/admission.py), and the slot is given back
in the hop that stores the reply, so limits cost no extra crossing of the async boundary.
"""
import threading
import uuid
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import cache

LEASE_MARGIN_SEC = 30
RATE_WINDOW_SEC = 60
_local_streams: dict[int, int] = {}
_local_lock = threading.Lock()


@dataclass
class StreamSlot:
    user_id: int
    cache_key: str | None = None
    released: bool = False


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


def stream_slot_release(*, slot: StreamSlot) -> None:
    """Idempotent, and safe when two threads race to release the same slot."""
    with _local_lock:
        if slot.released:
            return
        slot.released = True
        _local_decrement(slot.user_id)
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
_TAKE_SCRIPT = """
local slot = -1
for i = 1, #KEYS - 1 do
  if redis.call('SET', KEYS[i], ARGV[1], 'NX', 'EX', ARGV[2]) then slot = i - 1; break end
end
if slot < 0 then return {-1, 0} end
local count = redis.call('INCR', KEYS[#KEYS])
if count == 1 then redis.call('EXPIRE', KEYS[#KEYS], ARGV[3]) end
return {slot, count}
"""


def _redis_client():
    """The raw client of Django's Redis cache, or None for any other cache backend."""
    from django.core.cache.backends.redis import RedisCache

    return cache._cache.get_client(write=True) if isinstance(cache, RedisCache) else None


def stream_slot_and_rate_take(*, user_id: int) -> tuple[StreamSlot | None, bool]:
    """`stream_slot_acquire` then `message_rate_allow`, in one Redis round trip when the cache is
    Redis: (None, False) without a free slot; (slot, False) past the rate, the slot still held
    (the caller gives it back); (slot, True) admitted."""
    client = _redis_client()
    if client is None:
        slot = stream_slot_acquire(user_id=user_id)
        return (slot, message_rate_allow(user_id=user_id)) if slot is not None else (None, False)
    limit = settings.CHAT_MAX_CONCURRENT_STREAMS
    if not _local_take(user_id, limit):
        return None, False
    slot = StreamSlot(user_id=user_id)
    keys = [cache.make_and_validate_key(_slot_key(user_id, i)) for i in range(limit)]
    keys.append(cache.make_and_validate_key(f"chat:rate:{user_id}"))
    ttl = int(settings.TURN_BUDGET_SEC) + LEASE_MARGIN_SEC
    try:
        index, count = client.eval(_TAKE_SCRIPT, len(keys), *keys, uuid.uuid4().hex, ttl, RATE_WINDOW_SEC)
    except BaseException:
        _local_give_back(user_id)
        raise
    if int(index) < 0:
        _local_give_back(user_id)
        return None, False
    slot.cache_key = _slot_key(user_id, int(index))  # released with cache.delete, which adds the prefix
    return slot, int(count) <= settings.CHAT_RATE_PER_MINUTE
