"""Cross from the async stream path into the ORM without a thread per stream.

`sync_to_async`'s default (thread_sensitive=True) gives every ASGI request its own executor
thread, which lives as long as the request: for a long stream that is a parked thread per
stream. The stream path's database work is grouped into a few sync services that run on the
shared default executor instead; each closes its connection afterwards, because nothing else
closes connections opened on pool threads (CONN_MAX_AGE=0 is only honoured at request end).
"""
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.db import close_old_connections, connection

P = ParamSpec("P")
R = TypeVar("R")


def _closing(fn: Callable[P, R]) -> Callable[P, R]:
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        close_old_connections()
        try:
            return fn(*args, **kwargs)
        finally:
            connection.close()

    return run


async def db_call(fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
    """Runs `fn` (a sync service) on the shared executor and closes its connection."""
    return await sync_to_async(_closing(fn), thread_sensitive=False)(*args, **kwargs)


class ClosingExecutor(ThreadPoolExecutor):
    """A thread pool whose calls close their database connection when they return."""

    def submit(self, fn, /, *args, **kwargs):
        return super().submit(_closing(fn), *args, **kwargs)


# Thread-sensitive sync calls made during a turn (e.g. the runtime reading the agent's catalog
# with plain `sync_to_async`) would otherwise start a thread per request in Django's ASGI
# handler and keep it, idle, for the whole stream. Turns run them here instead: one thread,
# one call at a time, as asgiref requires of a thread-sensitive executor.
turn_sync_executor = ClosingExecutor(max_workers=1, thread_name_prefix="chat-turn-sync")
