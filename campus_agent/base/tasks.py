"""Tasks started and not awaited (a run's end announced to its followers, a run stopped after its
client hung up): kept referenced until they end, since the event loop keeps only weak references
to its tasks and would let one be collected half-way."""
import asyncio
from collections.abc import Coroutine

_running: set[asyncio.Future] = set()


def background(coro: Coroutine) -> asyncio.Future:
    """Runs `coro` in a task of its own, not awaited; an exception it raises is logged by the loop."""
    task = asyncio.ensure_future(coro)
    _running.add(task)
    task.add_done_callback(_running.discard)
    return task
