"""A run's stream slot, and a follower's (docs/design.md#limits): per user, 429 past the limit.

**The run's slot is one object, `RunLease`, taken when its `async with` is entered and released
when it is left — the only take and the only release of a stream slot.** The run's task
(chat_app.runs.engine) holds that `async with` around everything the run does: its admission (a
new turn) or its re-admission after a wait, its turn, storing its end. So the slot is released
once whatever ends the run: a refused admission (no slot, the rate, the quota, a 404), a
finished, stopped, failed or paused run. A run that no task holds any more (its worker died) is
ended by the reaper, which adopts the lease by the key its row keeps (`RunLease.adopted`) and
releases it the same way.

A slot is a key `chat:streams:<user>:<i>` (i < CHAT_MAX_CONCURRENT_STREAMS) added to the Django
cache (`add` is atomic in every backend) with a TTL of the turn budget plus a margin, so a
crashed worker cannot hold one forever. With a shared cache (Redis) the limit holds across
workers; with the default local-memory cache it is exact for the one process. The cache is the
count: there is no second one in process memory.

A new turn's lease also counts its message in the user's one-minute window (`add` then `incr`,
both atomic). The window opens with the user's first counted message (the key's expiry), not on
the clock's minute: a bucket keyed on `time() // 60` reset the count whenever a minute boundary
fell between two messages.

Where the keys are kept is chosen once per configured cache (`_slots()`): with Django's Redis
cache the slot and the window are taken in one round trip (a script) by the asyncio client; with
the local-memory cache in the event loop itself (a dict under a lock, no I/O); with any other
cache through Django's cache API on the database threads.
"""
import asyncio
import uuid
import weakref

from django.conf import settings
from django.core.cache import DEFAULT_CACHE_ALIAS, cache, caches
from django.core.cache.backends.locmem import LocMemCache
from loguru import logger
from redis.exceptions import RedisError

from campus_agent.base import errors
from campus_agent.base.windows import window_count

LEASE_MARGIN_SEC = 30
RATE_WINDOW_SEC = 60
SLOT_KEY_PREFIX = "chat:streams:"
FOLLOWER_KEY_PREFIX = "chat:followers:"


def _slot_key(user_id: int, slot: int) -> str:
    return f"{SLOT_KEY_PREFIX}{user_id}:{slot}"


def _lease_ttl() -> int:
    return int(settings.TURN_BUDGET_SEC) + LEASE_MARGIN_SEC


class RunLease:
    """The stream slot of one run. `async with RunLease(user_id=…, new_message=True) as lease:`
    takes a slot if one is free (`lease.held`) and, for a new message, counts it in the user's
    window (`lease.rate_count`: the messages the window holds with this one); leaving the block
    gives the slot back, exactly once.

    `refuse_unless_held()` is what admission calls: 429 (42901 / 42902) when the run cannot go on.
    The rate compared is the caller's (their groups': chat_app.runs.group_limits), known on the
    database's side; the slot's refusal needs no database (`refuse_without_slot`).
    """

    __slots__ = ("user_id", "new_message", "key", "rate_count", "_entered")

    def __init__(self, *, user_id: int, new_message: bool):
        self.user_id = user_id
        self.new_message = new_message
        self.key = ""  # the slot's cache key once taken ("": none)
        self.rate_count = 0
        self._entered = False

    @classmethod
    def adopted(cls, *, key: str) -> "RunLease":
        """The lease of a run that no task holds any more (the reaper's): entering takes nothing,
        leaving releases `key`."""
        lease = cls(user_id=0, new_message=False)
        lease.key, lease._entered = key, True
        return lease

    @property
    def held(self) -> bool:
        return bool(self.key)

    async def __aenter__(self) -> "RunLease":
        if not self._entered:
            self._entered = True
            self.key, self.rate_count = await _slots().atake(self.user_id, rate=self.new_message)
        return self

    async def __aexit__(self, *exc_info) -> None:
        key, self.key = self.key, ""
        if key:
            await _slots().arelease(key)

    def rate_kept(self, rate_per_minute: int | None = None) -> bool:
        """Whether the message counted is within `rate_per_minute` (else CHAT_RATE_PER_MINUTE); a
        lease of no new message (a resume) counts none."""
        limit = settings.CHAT_RATE_PER_MINUTE if rate_per_minute is None else rate_per_minute
        return not self.new_message or self.rate_count <= limit

    def refuse_without_slot(self) -> None:
        """Raises ApiError 429 (42901) when no slot was free."""
        if not self.held:
            raise errors.ApiError(errors.MSG_TOO_MANY_STREAMS, code=errors.TOO_MANY_STREAMS, status=429)

    def refuse_unless_held(self, *, rate_per_minute: int | None = None) -> None:
        """Raises ApiError 429 when no slot was free (42901), or past the message rate (42902):
        `rate_per_minute`, else CHAT_RATE_PER_MINUTE."""
        self.refuse_without_slot()
        if not self.rate_kept(rate_per_minute):
            raise errors.ApiError(errors.MSG_RATE_LIMITED, code=errors.RATE_LIMITED, status=429,
                                  headers={"Retry-After": "60"})

    def __repr__(self) -> str:
        return f"RunLease(user={self.user_id}, key={self.key!r})"


def stream_slots_held(*, user_id: int) -> int:
    """How many of the user's slots are leased now (every worker's, with a shared cache). Asked by
    key only: the Redis script's values are no pickles, which `cache.get` would try to read."""
    return sum(1 for i in range(settings.CHAT_MAX_CONCURRENT_STREAMS) if cache.has_key(_slot_key(user_id, i)))


def message_rate_count(*, user_id: int) -> int:
    """Counts a message in the user's open window (the cache API's way): the messages it holds now."""
    return window_count(f"chat:rate:{user_id}", RATE_WINDOW_SEC)


# With the Redis cache, the slot and the rate window are taken in one round trip: a script runs
# the same steps as the cache calls (SET NX EX per slot key, then INCR + EXPIRE on the window's
# first message) atomically on the server. Through Django's cache API they cost four round trips
# (add; add, exists, incr), all before the first chunk (docs/benchmarks.md). The slot keys are
# `<prefix><i>`, built by the script: their number (the limit) costs nothing on our side. A single
# Redis, not a cluster (the keys are not declared). ARGV[5] = 0: no rate window (a resume).
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
    """Slots through Django's cache API: any backend. In the event loop directly for the local-
    memory cache (a dict under a lock, no I/O); else on the database threads."""

    def __init__(self, backend) -> None:
        self._in_loop = isinstance(backend, LocMemCache)

    @staticmethod
    def _take(user_id: int, rate: bool) -> tuple[str, int]:
        owner = uuid.uuid4().hex
        for i in range(settings.CHAT_MAX_CONCURRENT_STREAMS):
            key = _slot_key(user_id, i)
            if cache.add(key, owner, _lease_ttl()):
                return key, (message_rate_count(user_id=user_id) if rate else 0)
        return "", 0

    async def atake(self, user_id: int, *, rate: bool) -> tuple[str, int]:
        if self._in_loop:
            return self._take(user_id, rate)
        from campus_agent.base.asyncdb import db_call

        return await db_call(self._take, user_id, rate)

    async def arelease(self, key: str) -> None:
        if self._in_loop:
            cache.delete(key)
            return
        from campus_agent.base.asyncdb import db_call

        await db_call(cache.delete, key)


class _RedisSlots:
    """Slots on Django's Redis cache: one script per take, through the asyncio client."""

    def __init__(self, backend) -> None:
        self._backend = backend
        self._scripts: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # loop → (client, script)

    def _script(self):
        """This loop's client and registered script (EVALSHA after the first call): the run bus's
        client when the cache is on the same Redis, so a worker keeps one asyncio pool."""
        from campus_agent.base.redis_clients import redis_client

        loop = asyncio.get_running_loop()
        found = self._scripts.get(loop)
        if found is None:
            client = redis_client(self._backend._servers[0])
            found = self._scripts[loop] = (client, client.register_script(_TAKE_SCRIPT))
        return found

    async def atake(self, user_id: int, *, rate: bool) -> tuple[str, int]:
        keys = [cache.make_and_validate_key(f"chat:rate:{user_id}")]
        prefix = cache.make_and_validate_key(_slot_key(user_id, 0))[:-1]
        args = [prefix, settings.CHAT_MAX_CONCURRENT_STREAMS, uuid.uuid4().hex, _lease_ttl(), RATE_WINDOW_SEC if rate else 0]
        _, script = self._script()
        index, count = await script(keys=keys, args=args)
        if int(index) < 0:
            return "", 0
        # Released with the prefix added (make_and_validate_key), as cache.delete would.
        return _slot_key(user_id, int(index)), int(count)

    async def arelease(self, key: str) -> None:
        try:
            client, _ = self._script()
            await client.delete(self._backend.make_and_validate_key(key))
        except RedisError as exc:
            logger.warning("giving a stream slot back failed ({}); its lease expires on its own", exc)


_stores: dict[str, "_CacheSlots | _RedisSlots"] = {}


def _slots() -> "_CacheSlots | _RedisSlots":
    """The slot store of the configured cache, chosen once per cache configuration (tests switch
    the cache with override_settings; a deployment has one)."""
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


# --- followers ---------------------------------------------------------------------------------

def _follower_ttl() -> int:
    # A follower lasts as long as the run it follows may: its budget, a wait for a person, a margin.
    return int(settings.TURN_BUDGET_SEC + settings.APPROVAL_TIMEOUT_SEC) + LEASE_MARGIN_SEC


class FollowerLease:
    """One follower of a user's runs (`GET /api/v1/runs/<id>/events`), of at most
    RUN_MAX_FOLLOWERS_PER_USER: taken with the follower's admission (`follower_lease_take`),
    released (`release()`, idempotent) when its response ends, however it ends; expiring on its
    own if a worker dies."""

    __slots__ = ("key",)

    def __init__(self, key: str) -> None:
        self.key = key

    async def release(self) -> None:
        key, self.key = self.key, ""
        if key:
            await _slots().arelease(key)


def follower_lease_take(*, user_id: int) -> FollowerLease | None:
    """A follower lease, or None when RUN_MAX_FOLLOWERS_PER_USER are held: keys
    `chat:followers:<user>:<i>` added to the cache (atomic in every backend; with Redis the count
    holds across workers). Sync (the follower's admission, on a database thread): up to that many
    cache round trips."""
    owner = uuid.uuid4().hex
    for i in range(max(settings.RUN_MAX_FOLLOWERS_PER_USER, 0)):
        key = f"{FOLLOWER_KEY_PREFIX}{user_id}:{i}"
        if cache.add(key, owner, _follower_ttl()):
            return FollowerLease(key)
    return None
