"""The per-user limits on the Redis cache take the slot and count the rate in one round trip
(a script); they must behave exactly like the cache calls they replace, and mix with them."""
import pytest
import redis
from django.core.cache import caches

from chat_app.runs.lease import message_rate_allow, stream_slot_and_rate_take, stream_slots_held


@pytest.fixture
def redis_cache(settings, redis_url):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": redis_url,
                                   "KEY_PREFIX": "limits-test"}}
    cache = caches["default"]
    assert type(cache).__name__ == "RedisCache"
    cache.clear()
    yield cache
    cache.clear()


def test_slots_and_rate_in_one_call_like_the_cache_calls(redis_cache, settings, redis_url):
    settings.CHAT_MAX_CONCURRENT_STREAMS = 2
    settings.CHAT_RATE_PER_MINUTE = 3
    first, ok1 = stream_slot_and_rate_take(user_id=7)
    second, ok2 = stream_slot_and_rate_take(user_id=7)
    assert ok1 and ok2 and first.key != second.key
    assert stream_slot_and_rate_take(user_id=7) == (None, False)  # both slots leased
    assert redis.Redis.from_url(redis_url).exists(redis_cache.make_key(first.key))
    first.release_now()  # cache.delete frees what the script set
    third, ok3 = stream_slot_and_rate_take(user_id=7)
    assert third is not None and ok3  # the third message of the window
    third.release_now()
    assert not message_rate_allow(user_id=7)  # the cache API counts on from the script's count
    fourth, ok4 = stream_slot_and_rate_take(user_id=7)
    assert fourth is not None and not ok4  # past the rate: the caller gives the slot back
    fourth.release_now()
    second.release_now()
    assert stream_slots_held(user_id=7) == 0
    ttl = redis.Redis.from_url(redis_url).ttl(redis_cache.make_key("chat:rate:7"))
    assert 0 < ttl <= 60  # the window expires one minute after its first message


async def test_the_event_loop_path_shares_slots_and_window_with_the_sync_path(redis_cache, settings, redis_url):
    """astream_… (the asyncio client) and the sync calls lease the same keys and count the same window."""
    from asgiref.sync import sync_to_async

    from chat_app.runs.lease import astream_slot_and_rate_take

    settings.CHAT_MAX_CONCURRENT_STREAMS = 2
    settings.CHAT_RATE_PER_MINUTE = 3
    first, ok1 = await astream_slot_and_rate_take(user_id=8)
    second, ok2 = await sync_to_async(stream_slot_and_rate_take)(user_id=8)
    assert ok1 and ok2 and {first.key, second.key} == {"chat:streams:8:0", "chat:streams:8:1"}
    assert await astream_slot_and_rate_take(user_id=8) == (None, False)  # both slots leased
    await first.release()
    await first.release()  # idempotent
    assert not redis.Redis.from_url(redis_url).exists(redis_cache.make_key("chat:streams:8:0"))
    third, ok3 = await astream_slot_and_rate_take(user_id=8)
    assert third.key == "chat:streams:8:0" and ok3  # the third message of the window
    await third.release()
    fourth, ok4 = await astream_slot_and_rate_take(user_id=8)
    assert fourth is not None and not ok4  # past the rate
    await fourth.release()
    await sync_to_async(second.release_now)()
    assert stream_slots_held(user_id=8) == 0


def test_a_large_limit_costs_no_key_per_slot_on_our_side(redis_cache, settings):
    """The script builds the slot keys: a limit of 100,000 (the benchmark's) takes one round trip
    of a few arguments, not 100,001 keys (which cost ≈ 10 ms of CPU per turn)."""
    import time

    settings.CHAT_MAX_CONCURRENT_STREAMS = 100_000
    started = time.process_time()
    for _ in range(10):
        slot, ok = stream_slot_and_rate_take(user_id=9)
        assert ok
        slot.release_now()
    assert (time.process_time() - started) / 10 < 0.005


async def test_a_burst_past_the_connection_pool_waits_for_a_connection(redis_cache, settings):
    """More turns admitted at once than the worker has Redis connections wait for one: redis-py's
    default pool raised MaxConnectionsError there, and a burst of 1,000 turns got 774 HTTP 500s."""
    import asyncio

    from chat_app.runs.lease import astream_slot_and_rate_take

    settings.REDIS_MAX_CONNECTIONS = 2
    settings.CHAT_MAX_CONCURRENT_STREAMS = 200
    settings.CHAT_RATE_PER_MINUTE = 200
    # 150: past redis-py's default pool of 100 too
    taken = await asyncio.gather(*(astream_slot_and_rate_take(user_id=9) for _ in range(150)))
    assert all(lease is not None and ok for lease, ok in taken)
    assert len({lease.key for lease, _ in taken}) == 150
    await asyncio.gather(*(lease.release() for lease, _ in taken))
    assert await astream_slot_and_rate_take(user_id=9) is not None
