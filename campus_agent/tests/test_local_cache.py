"""The cache of a worker without Redis (campus_agent/base/local_cache.py): the limits of a burst of
students all held, expired entries dropped before live ones."""
import uuid
from contextlib import AsyncExitStack

from django.core.cache import caches

from campus_agent.base.local_cache import LocalCache
from chat_app.runs.lease import RunLease, stream_slots_held


async def test_a_thousand_students_streaming_at_once_keep_their_stream_slots():
    """With Django's default local-memory cache (300 entries) 700 of these leases were dropped,
    so those students could open streams past their limit."""
    assert isinstance(caches["default"], LocalCache)
    users = range(10_000_001, 10_001_001)
    async with AsyncExitStack() as held:
        leases = [await held.enter_async_context(RunLease(user_id=user, new_message=False)) for user in users]
        assert all(lease.held for lease in leases)
        assert sum(stream_slots_held(user_id=user) for user in users) == 1000
    assert sum(stream_slots_held(user_id=user) for user in users) == 0


def _cache(max_entries: int) -> LocalCache:
    return LocalCache(f"test-{uuid.uuid4().hex}", {"OPTIONS": {"MAX_ENTRIES": max_entries}})


def test_a_full_cache_drops_what_has_expired_before_what_is_live():
    cache = _cache(10)
    for i in range(6):
        cache.set(f"live{i}", i, None)  # the least recently used: Django's cull would drop these
    for i in range(4):
        cache.set(f"expired{i}", i, 0)  # a timeout of 0: expired when stored
    cache.set("new", "n", None)  # the cache is full: it culls
    assert [cache.get(f"live{i}") for i in range(6)] == list(range(6))
    assert cache.get("new") == "n"
    assert len(cache._cache) == 7


def test_a_cache_full_of_live_entries_stays_bounded():
    cache = _cache(9)
    for i in range(9):
        cache.set(f"live{i}", i, None)
    cache.set("new", "n", None)  # nothing expired: the least recently used third goes, as in Django
    assert cache.get("new") == "n"
    assert len(cache._cache) == 7
    assert cache.get("live0") is None and cache.get("live8") == 8
