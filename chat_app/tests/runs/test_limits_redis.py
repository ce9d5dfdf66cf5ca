"""A run's lease on the Redis cache takes the slot and counts the rate in one round trip (a
script, through the asyncio client); it must behave exactly like the cache calls it replaces, and
mix with them."""
import asyncio
import time

import pytest
import redis
from django.core.cache import caches

from campus_agent.base.errors import ApiError
from chat_app.runs.lease import RunLease, message_rate_count, stream_slots_held


@pytest.fixture
def redis_cache(settings, redis_url):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": redis_url,
                                   "KEY_PREFIX": "limits-test"}}
    cache = caches["default"]
    assert type(cache).__name__ == "RedisCache"
    cache.clear()
    yield cache
    cache.clear()


async def test_slots_and_rate_in_one_call_like_the_cache_calls(redis_cache, settings, redis_url):
    settings.CHAT_MAX_CONCURRENT_STREAMS = 2
    settings.CHAT_RATE_PER_MINUTE = 3
    async with RunLease(user_id=7, new_message=True) as first, RunLease(user_id=7, new_message=True) as second:
        assert first.rate_kept() and second.rate_kept() and first.key != second.key
        async with RunLease(user_id=7, new_message=True) as third:
            assert not third.held  # both slots leased
        assert redis.Redis.from_url(redis_url).exists(redis_cache.make_key(first.key))
        assert redis_cache.has_key(first.key)  # the cache API sees what the script set
        assert stream_slots_held(user_id=7) == 2
    async with RunLease(user_id=7, new_message=True) as third:
        assert third.held and third.rate_kept()  # the third message of the window
    assert message_rate_count(user_id=7) == 4  # the cache API counts on from the script's count
    async with RunLease(user_id=7, new_message=True) as fourth:
        assert fourth.held and not fourth.rate_kept()  # past the rate: refused, and the slot given back
        with pytest.raises(ApiError) as refused:
            fourth.refuse_unless_held()
        assert refused.value.code == 42902 and refused.value.headers == {"Retry-After": "60"}
    assert stream_slots_held(user_id=7) == 0
    ttl = redis.Redis.from_url(redis_url).ttl(redis_cache.make_key("chat:rate:7"))
    assert 0 < ttl <= 60  # the window expires one minute after its first message


async def test_a_slot_given_back_is_taken_again_and_a_resume_counts_no_message(redis_cache, settings, redis_url):
    settings.CHAT_MAX_CONCURRENT_STREAMS = 2
    settings.CHAT_RATE_PER_MINUTE = 1
    async with RunLease(user_id=8, new_message=True) as first:
        assert first.key == "chat:streams:8:0" and first.rate_kept()
    assert not redis.Redis.from_url(redis_url).exists(redis_cache.make_key("chat:streams:8:0"))
    async with RunLease(user_id=8, new_message=False) as resumed:
        assert resumed.key == "chat:streams:8:0"  # the same slot, free again
        resumed.refuse_unless_held()  # a resumed run is no new message: the rate does not apply
    async with RunLease(user_id=8, new_message=True) as second:
        assert second.held and not second.rate_kept()  # the window still holds the one message
    assert stream_slots_held(user_id=8) == 0


async def test_a_large_limit_costs_no_key_per_slot_on_our_side(redis_cache, settings):
    """The script builds the slot keys: a limit of 100,000 (the benchmark's) takes one round trip
    of a few arguments, not 100,001 keys (which cost ≈ 10 ms of CPU per turn)."""
    settings.CHAT_MAX_CONCURRENT_STREAMS = 100_000
    started = time.process_time()
    for _ in range(10):
        async with RunLease(user_id=9, new_message=True) as lease:
            assert lease.rate_kept()
    assert (time.process_time() - started) / 10 < 0.005


async def test_a_burst_past_the_connection_pool_waits_for_a_connection(redis_cache, settings):
    """More turns admitted at once than the worker has Redis connections wait for one: redis-py's
    default pool raised MaxConnectionsError there, and a burst of 1,000 turns got 774 HTTP 500s."""
    settings.REDIS_MAX_CONNECTIONS = 2
    settings.CHAT_MAX_CONCURRENT_STREAMS = 200
    settings.CHAT_RATE_PER_MINUTE = 200
    leases = [RunLease(user_id=9, new_message=True) for _ in range(150)]  # past redis-py's default pool of 100 too
    await asyncio.gather(*(lease.__aenter__() for lease in leases))
    assert all(lease.held and lease.rate_kept() for lease in leases)
    assert len({lease.key for lease in leases}) == 150
    await asyncio.gather(*(lease.__aexit__(None, None, None) for lease in leases))
    async with RunLease(user_id=9, new_message=True) as lease:
        assert lease.held
