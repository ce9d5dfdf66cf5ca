"""Per-user stream limits: concurrent streams and messages per minute (DESIGN §7), 429 past them.

A stream slot is a `SlotLease`: one key `chat:streams:<user>:<i>` (i < CHAT_MAX_CONCURRENT_STREAMS)
added to the Django cache (`add` is atomic in every backend) with a TTL of the turn budget plus a
margin, so a crashed worker cannot hold a slot forever. It is taken when a turn is admitted (or
a waiting run resumes), handed to the run, and released once, idempotently, in the run's one
`finally` (chat_app.runs.engine); whoever ends a run no worker holds (the reaper, the close of a
waiting run) releases the same lease by the key the run row keeps (`SlotLease.of_key`). With a
shared cache (Redis) the limit holds across workers; with the default local-memory cache it is
exact for the one process. There is no second count in process memory: the cache is the count.

The rate is a one-minute window per user in the cache (`add` then `incr`, both atomic). The
window opens with the user's first counted message (the key's expiry), not on the clock's minute:
a bucket keyed on `time() // 60` reset the count whenever a minute boundary fell between two
messages, which let a burst through and made the limit depend on when it was measured.

Where the lease is kept is chosen once per configured cache (`_slots()`): with Django's Redis
cache the lease and the rate window are taken in one round trip (a script), and a caller the
stream already knows takes and releases them in the event loop with the asyncio client; with any
other cache through Django's cache API (in the event loop itself for the local-memory cache, which
does no I/O).
"""
import asyncio
import uuid
import weakref

from django.conf import settings
from django.core.cache import DEFAULT_CACHE_ALIAS, cache, caches
from django.core.cache.backends.locmem import LocMemCache
from loguru import logger
from redis.exceptions import RedisError

LEASE_MARGIN_SEC = 30
RATE_WINDOW_SEC = 60
SLOT_KEY_PREFIX = "chat:streams:"
FOLLOWER_KEY_PREFIX = "chat:followers:"


def _slot_key(user_id: int, slot: int) -> str:
    return f"{SLOT_KEY_PREFIX}{user_id}:{slot}"


def _lease_ttl() -> int:
    return int(settings.TURN_BUDGET_SEC) + LEASE_MARGIN_SEC


class SlotLease:
    """One stream slot of one user, held until `release()` (idempotent, safe to race)."""

    __slots__ = ("key", "_released")

    def __init__(self, key: str) -> None:
        self.key = key
        self._released = False

    @classmethod
    def of_key(cls, key: str) -> "SlotLease":
        """The lease a run row names (`Run.slot_key`): for whoever ends a run no worker holds."""
        return cls(key)

    @property
    def released(self) -> bool:
        return self._released

    def _claim_release(self) -> bool:
        # One event loop or one thread per lease: the flag flips before the first await.
        if self._released or not self.key:
            self._released = True
            return False
        self._released = True
        return True

    async def release(self) -> None:
        """Gives the slot back (in the event loop where the store allows it); a failure is logged,
        not raised: the lease expires on its own."""
        if self._claim_release():
            await _slots().arelease(self.key)

    def release_now(self) -> None:
        """See release(); for sync code (a refused admission, the reaper's database call)."""
        if self._claim_release():
            _slots().release(self.key)

    def __repr__(self) -> str:
        return f"SlotLease({self.key!r}, released={self._released})"


def stream_slots_held(*, user_id: int) -> int:
    """How many of the user's slots are leased now (every worker's, with a shared cache)."""
    return sum(1 for i in range(settings.CHAT_MAX_CONCURRENT_STREAMS) if cache.get(_slot_key(user_id, i)) is not None)


def stream_slot_take(*, user_id: int) -> SlotLease | None:
    """A slot for one more stream of this user, or None when CHAT_MAX_CONCURRENT_STREAMS are leased."""
    return _slots().take(user_id)


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
# runs the same steps as the cache calls (SET NX EX per slot key, then INCR + EXPIRE on the
# window's first message) atomically on the server. Through Django's cache API they cost four
# round trips (add; add, exists, incr), all before the first chunk (docs/benchmarks.md). The slot
# keys are `<prefix><i>`, built by the script: their number (the limit) costs nothing on our side.
# A single Redis, not a cluster (the keys are not declared). ARGV[5] = 0: no rate window (a resume).
_TAKE_SCRIPT = """
local slot = -1
for i = 0, tonumber(ARGV[2]) - 1 do
  if redis.call('SET', ARGV[1] .. i, ARGV[3], 'NX', 'EX', ARGV[4]) then slot = i; break end
end
if slot < 0 then return {-1, 0} end
if tonumber(ARGV[5]) == 0 then return {slot, 0} end
local count = redis.call('INCR', KEYS[1])
if count == 1 then redis.call('EXPIRE', KEYS[1], ARGV[5]) end
return {slot, count}
"""


class _CacheSlots:
    """Leases through Django's cache API: any backend. In the event loop directly for the local-
    memory cache (a dict under a lock, no I/O); else through the database threads."""

    def __init__(self, backend) -> None:
        self._in_loop = isinstance(backend, LocMemCache)

    def take(self, user_id: int) -> SlotLease | None:
        owner = uuid.uuid4().hex
        for i in range(settings.CHAT_MAX_CONCURRENT_STREAMS):
            key = _slot_key(user_id, i)
            if cache.add(key, owner, _lease_ttl()):
                return SlotLease(key)
        return None

    def take_with_rate(self, user_id: int) -> tuple[SlotLease | None, bool]:
        lease = self.take(user_id)
        return (lease, message_rate_allow(user_id=user_id)) if lease is not None else (None, False)

    async def atake_with_rate(self, user_id: int) -> tuple[SlotLease | None, bool] | None:
        return self.take_with_rate(user_id) if self._in_loop else None

    def release(self, key: str) -> None:
        cache.delete(key)

    async def arelease(self, key: str) -> None:
        if self._in_loop:
            cache.delete(key)
            return
        from campus_agent.base.asyncdb import db_call

        await db_call(cache.delete, key)


class _RedisSlots:
    """Leases on Django's Redis cache: one script per take, sync or through the asyncio client."""

    def __init__(self, backend) -> None:
        self._backend = backend
        self._scripts: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # loop → (client, script)

    def _args(self, user_id: int, *, rate: bool) -> tuple[list[str], list]:
        keys = [cache.make_and_validate_key(f"chat:rate:{user_id}")]
        prefix = cache.make_and_validate_key(_slot_key(user_id, 0))[:-1]
        args = [prefix, settings.CHAT_MAX_CONCURRENT_STREAMS, uuid.uuid4().hex, _lease_ttl(),
                RATE_WINDOW_SEC if rate else 0]
        return keys, args

    @staticmethod
    def _taken(user_id: int, index, count, *, rate: bool) -> tuple[SlotLease | None, bool]:
        if int(index) < 0:
            return None, False
        # Released with cache.delete / make_and_validate_key, which add the prefix.
        return SlotLease(_slot_key(user_id, int(index))), (not rate or int(count) <= settings.CHAT_RATE_PER_MINUTE)

    def _eval(self, user_id: int, *, rate: bool):
        keys, args = self._args(user_id, rate=rate)
        index, count = self._backend._cache.get_client(write=True).eval(_TAKE_SCRIPT, len(keys), *keys, *args)
        return self._taken(user_id, index, count, rate=rate)

    def take(self, user_id: int) -> SlotLease | None:
        return self._eval(user_id, rate=False)[0]

    def take_with_rate(self, user_id: int) -> tuple[SlotLease | None, bool]:
        return self._eval(user_id, rate=True)

    def _async_script(self):
        """This loop's client and registered script (EVALSHA after the first call): the run bus's
        client when the cache is on the same Redis, so a worker keeps one asyncio pool."""
        from campus_agent.base.redis_clients import redis_client

        loop = asyncio.get_running_loop()
        found = self._scripts.get(loop)
        if found is None:
            client = redis_client(self._backend._servers[0])
            found = self._scripts[loop] = (client, client.register_script(_TAKE_SCRIPT))
        return found

    async def atake_with_rate(self, user_id: int) -> tuple[SlotLease | None, bool] | None:
        keys, args = self._args(user_id, rate=True)
        _, script = self._async_script()
        index, count = await script(keys=keys, args=args)
        return self._taken(user_id, index, count, rate=True)

    def release(self, key: str) -> None:
        cache.delete(key)

    async def arelease(self, key: str) -> None:
        try:
            client, _ = self._async_script()
            await client.delete(self._backend.make_and_validate_key(key))
        except RedisError as exc:
            logger.warning("giving a stream slot back failed ({}); its lease expires on its own", exc)


_stores: dict[str, "_CacheSlots | _RedisSlots"] = {}


def _slots() -> "_CacheSlots | _RedisSlots":
    """The lease store of the configured cache, chosen once per cache configuration (tests
    switch the cache with override_settings; a deployment has one)."""
    from django.core.cache.backends.redis import RedisCache

    config = repr(sorted(settings.CACHES[DEFAULT_CACHE_ALIAS].items()))
    store = _stores.get(config)
    if store is None:
        backend = caches[DEFAULT_CACHE_ALIAS]  # the backend itself: `cache` is a proxy
        probe = _slot_key(0, 0)
        # The script builds slot keys as `<prefix><i>`: only with the default key function.
        scripted = isinstance(backend, RedisCache) and backend.make_key(probe) == backend.make_key(probe[:-1]) + "0"
        store = _stores[config] = _RedisSlots(backend) if scripted else _CacheSlots(backend)
    return store


def stream_slot_and_rate_take(*, user_id: int) -> tuple[SlotLease | None, bool]:
    """`stream_slot_take` then `message_rate_allow`, in one round trip with Redis: (None, False)
    without a free slot; (lease, False) past the rate, the lease still held (the caller releases
    it); (lease, True) admitted."""
    return _slots().take_with_rate(user_id)


async def astream_slot_and_rate_take(*, user_id: int) -> tuple[SlotLease | None, bool] | None:
    """See stream_slot_and_rate_take(), in the event loop; None when the store cannot take it
    there without I/O in the loop (the caller takes it in its database call)."""
    return await _slots().atake_with_rate(user_id)


def _follower_ttl() -> int:
    # A follower lasts as long as the run it follows may: its budget, a wait for approval, a margin.
    return int(settings.TURN_BUDGET_SEC + settings.APPROVAL_TIMEOUT_SEC) + LEASE_MARGIN_SEC


def follower_lease_take(*, user_id: int) -> SlotLease | None:
    """A lease for one more follower of this user's runs (`GET /api/v1/runs/<id>/events`), or None
    when RUN_MAX_FOLLOWERS_PER_USER are held: keys `chat:followers:<user>:<i>` added to the cache
    (atomic in every backend; with Redis the count holds across workers), released like a stream
    slot (`SlotLease.release`, idempotent) when the follower's response ends, expiring on their
    own if a worker dies. Sync (the caller's database call): up to that many cache round trips."""
    owner = uuid.uuid4().hex
    for i in range(max(settings.RUN_MAX_FOLLOWERS_PER_USER, 0)):
        key = f"{FOLLOWER_KEY_PREFIX}{user_id}:{i}"
        if cache.add(key, owner, _follower_ttl()):
            return SlotLease(key)
    return None
