"""Fixed-window counters in the cache: one atomic count per event, shared by every worker when
the cache is (Redis with REDIS_URL; the embedded default's local memory serves one worker).

Checking a count of rows and then writing one is a race two workers win together (issue 42
found 25 uploads accepted against a limit of 20); an increment in the cache is not.
docs/security.md#limits-across-workers.
"""
from django.core.cache import cache


def window_count(key: str, window_sec: int) -> int:
    """Counts one event in `key`'s window (opened by its first event, `window_sec` long) and
    returns the events counted in it so far, this one included."""
    cache.add(key, 0, window_sec)  # only the window's first event sets its expiry
    try:
        return cache.incr(key)
    except ValueError:  # the window expired between add and incr: this is the first of a new one
        cache.add(key, 1, window_sec)
        return 1
