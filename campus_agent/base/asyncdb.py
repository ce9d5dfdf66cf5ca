"""Cross from the async stream path into the ORM on a few long-lived threads.

`sync_to_async`'s default (thread_sensitive=True) gives every ASGI request its own executor
thread, which lives as long as the request: for a long stream that is a parked thread per
stream. The stream path's database work is grouped into a few sync services (admission,
storing) that run on `db_executor`, a small fixed pool.

Those threads keep their database connection between calls. CONN_MAX_AGE stays 0 for the
project (under ASGI a persistent connection per request thread leaks, Django #33497), but here
the threads are few and fixed, so the connections are bounded by the pool size, and a stream no
longer pays a connect (SQLite's set-up pragmas, or a pool check-out on PostgreSQL) per call.
A connection is dropped after a database error and renewed after CONNECTION_MAX_AGE_SEC.
"""
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from typing import ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.db import DatabaseError, connection

P = ParamSpec("P")
R = TypeVar("R")

DB_THREADS = 4
CONNECTION_MAX_AGE_SEC = 60.0
_opened = threading.local()


def _connection_renew_if_old() -> None:
    if connection.connection is None:
        _opened.at = time.monotonic()
    elif time.monotonic() - getattr(_opened, "at", 0.0) > CONNECTION_MAX_AGE_SEC:
        connection.close()
        _opened.at = time.monotonic()


def _reusing(fn: Callable[P, R]) -> Callable[P, R]:
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        _connection_renew_if_old()
        try:
            return fn(*args, **kwargs)
        except DatabaseError:
            connection.close()  # it may be broken (server restart, lost socket): reconnect next time
            raise

    return run


class ReusingExecutor(ThreadPoolExecutor):
    """A thread pool whose threads keep (and look after) their database connection."""

    def submit(self, fn, /, *args, **kwargs):
        return super().submit(_reusing(fn), *args, **kwargs)

    def connections_close(self) -> None:
        """Closes every pool thread's connection once it has finished the call it is on (before a
        test database is flushed or dropped). Each thread takes exactly one of the closing calls,
        since each waits for all the others."""
        barrier = threading.Barrier(self._max_workers)

        def close() -> None:
            connection.close()
            barrier.wait(timeout=10)

        wait([ThreadPoolExecutor.submit(self, close) for _ in range(self._max_workers)])


db_executor = ReusingExecutor(max_workers=DB_THREADS, thread_name_prefix="chat-db")

# Thread-sensitive sync calls made during a turn (plain `sync_to_async` in the runtime) would
# otherwise start a thread per request in Django's ASGI handler and keep it, idle, for the
# whole stream. Turns run them here instead: one thread, one call at a time, as asgiref
# requires of a thread-sensitive executor.
turn_sync_executor = ReusingExecutor(max_workers=1, thread_name_prefix="chat-turn-sync")


# The run supervisor's heartbeat: a thread of its own. On the shared threads it waited behind a
# burst's admissions (6.3 s behind 1,000 turns opened at once on PostgreSQL, docs/benchmarks.md),
# and a beat later than RUN_STALE_SEC lets a reaper on any worker end runs that are alive.
beat_executor = ReusingExecutor(max_workers=1, thread_name_prefix="chat-beat")


async def db_call(fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
    """Runs `fn` (a sync service) on the database threads."""
    return await sync_to_async(fn, thread_sensitive=False, executor=db_executor)(*args, **kwargs)


async def beat_db_call(fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
    """Runs `fn` on the heartbeat's thread, never queued behind the stream path's calls."""
    return await sync_to_async(fn, thread_sensitive=False, executor=beat_executor)(*args, **kwargs)


def db_connections_close() -> None:
    """Closes the connections the stream path's threads keep open."""
    db_executor.connections_close()
    turn_sync_executor.connections_close()
    beat_executor.connections_close()
