"""How long an event loop was held, less the time its thread waited for a core.

A ticker task that wakes every 10 ms measures the wall time between its wake-ups. On a shared
machine part of a gap is the loop's thread waiting in the kernel's run queue while other
processes (the suite's other pytest-xdist workers, Chromium, PostgreSQL) have both cores: no
one's stall, and what made these checks run alone before. Linux counts that wait per thread
(`/proc/<pid>/task/<tid>/schedstat`, its second field, nanoseconds on a run queue); subtracted,
what is left is the time the thread ran something other than the loop's ready callbacks, or slept
in a blocking call, or waited for the GIL: a held loop (docs/testing.md#markers).

Where the kernel does not say (another system, schedstats compiled out), the wait reads as 0
and a gap is the wall time, as before.
"""
import asyncio
import os
import threading
import time
from collections.abc import Callable

TICK_SEC = 0.01


def run_queue_wait_reader() -> Callable[[], float]:
    """A reader of the calling thread's time on a run queue so far, in seconds (0.0 where the
    kernel does not count it). Call the reader on that thread."""
    path = f"/proc/{os.getpid()}/task/{threading.get_native_id()}/schedstat"

    def read() -> float:
        with open(path, "rb") as fh:
            return int(fh.read().split()[1]) / 1e9

    try:
        read()
    except (OSError, IndexError, ValueError):
        return lambda: 0.0
    return read


async def loop_held_ticker(gaps: list[float], stop: asyncio.Event) -> None:
    """Appends to `gaps`, until `stop` is set, each gap between two of its wake-ups less the
    loop's thread's time waiting for a core in it: `max(gaps)` is the longest the loop was held."""
    waited = run_queue_wait_reader()
    last, last_wait = time.perf_counter(), waited()
    while not stop.is_set():
        await asyncio.sleep(TICK_SEC)
        now, wait = time.perf_counter(), waited()
        gaps.append((now - last) - (wait - last_wait))
        last, last_wait = now, wait
