"""The cache of a worker without Redis: Django's local-memory cache, sized for a campus.

The cache holds the per-user limits (stream slots, the message rate, the daily token count), the
login throttle and the circuit breakers. Django's local-memory default keeps 300 entries and,
when full, drops the least recently used third: with 1,000 students streaming at once, 700 of
their stream slots were gone (the limit no longer held) and with them rate windows and throttle
counts. Here the cache keeps up to LOCAL_CACHE_MAX_ENTRIES entries (100,000 by default, a few
hundred bytes each), and when full it first drops what has expired; only a cache still full of
live entries loses its least recently used third, as Django's does.
"""
import time

from django.core.cache.backends.locmem import LocMemCache

DEFAULT_MAX_ENTRIES = 100_000


class LocalCache(LocMemCache):
    def _cull(self) -> None:  # called by _set, under the cache's lock
        now = time.time()
        expired = [key for key, expiry in self._expire_info.items() if expiry is not None and expiry <= now]
        for key in expired:
            self._delete(key)
        if len(self._cache) >= self._max_entries:
            super()._cull()
