"""The loop-held ticker (testkit/loop_stall.py): a held loop is a gap, a wait for a core is not."""
import asyncio
import os
import subprocess
import sys
import threading
import time

from testkit.loop_stall import loop_held_ticker, run_queue_wait_reader

HELD_SEC = 0.3


async def _longest_gap_while(hold) -> float:
    gaps: list[float] = []
    stop = asyncio.Event()
    ticker = asyncio.create_task(loop_held_ticker(gaps, stop))
    await asyncio.sleep(0.05)
    hold()
    await asyncio.sleep(0.05)
    stop.set()
    await ticker
    return max(gaps)


async def test_a_blocking_call_on_the_loop_is_a_gap():
    assert await _longest_gap_while(lambda: time.sleep(HELD_SEC)) >= HELD_SEC


async def test_work_on_the_loop_is_a_gap():
    def spin():  # HELD_SEC of this thread's CPU: the wall time of a spin includes its waits for a core
        end = time.thread_time() + HELD_SEC
        while time.thread_time() < end:
            pass

    assert await _longest_gap_while(spin) >= HELD_SEC


def test_waiting_for_a_core_is_not_a_gap():
    """The loop's thread on one core at the lowest priority beside three processes that never
    sleep: it waits for the core most of the second (the kernel's count says so), the wall gaps
    grow to a tenth of a second, and what is left once the wait is taken out is the tick."""
    core = min(os.sched_getaffinity(0))
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(3)]
    seen: dict = {}

    def starved_loop() -> None:
        os.sched_setaffinity(0, {core})  # this thread only
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)

        async def watch() -> None:
            gaps: list[float] = []
            stop = asyncio.Event()
            waited = run_queue_wait_reader()
            before = waited()
            ticker = asyncio.create_task(loop_held_ticker(gaps, stop))
            await asyncio.sleep(1.0)
            stop.set()
            await ticker
            seen.update(waited=waited() - before, longest=max(gaps))

        asyncio.run(watch())

    try:
        for spinner in spinners:
            os.sched_setaffinity(spinner.pid, {core})
        thread = threading.Thread(target=starved_loop)
        thread.start()
        thread.join()
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    assert seen["waited"] > 0.3, seen  # it did wait for the core (0.85–0.92 s seen)
    assert seen["longest"] < 0.05, seen  # 0.010 s seen, against 0.14–0.16 s of wall time
