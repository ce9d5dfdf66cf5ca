"""The in-process run bus (chat_app.runs.bus.MemoryBus): a follower that comes after a run's log
was forgotten (its retention ran out — at once with RUN_LOG_RETAIN_SEC = 0, before a fast run's
first follower read it) is told at once that there is no log, and reads the stored end; it used
to wait the whole ping interval for a log that could not appear."""
import asyncio
import uuid

import pytest

from chat_app.runs.bus import MemoryBus

pytestmark = pytest.mark.no_database


async def test_a_forgotten_log_is_no_log_at_once():
    bus = MemoryBus()
    run_id = uuid.uuid4()
    writer = bus.open(run_id, base=0)
    writer.append(b"id: 1\ndata: {}\n\n", end=True)
    bus.forget(run_id)
    batch = await asyncio.wait_for(bus.read(run_id, after=0, timeout=60), 5)  # not the 60 s
    assert not batch.known and not batch.frames


async def test_a_log_that_comes_again_is_waited_for_and_read():
    """A run forgotten here and then resumed here (its log opened anew) is followed as before."""
    bus = MemoryBus()
    run_id = uuid.uuid4()
    bus.open(run_id, base=0).append(b"id: 1\ndata: {}\n\n", end=True)
    bus.forget(run_id)
    writer = bus.open(run_id, base=1)
    writer.append(b"id: 2\ndata: {}\n\n", end=True)
    batch = await asyncio.wait_for(bus.read(run_id, after=1, timeout=60), 5)
    assert batch.known and batch.frames


async def test_an_unknown_run_is_still_waited_for():
    """A run this process never had (it may start here or arrive over the bus) is waited for."""
    bus = MemoryBus()
    run_id = uuid.uuid4()
    reading = asyncio.ensure_future(bus.read(run_id, after=0, timeout=60))
    await asyncio.sleep(0)
    assert not reading.done()
    bus.open(run_id, base=0).append(b"id: 1\ndata: {}\n\n", end=True)
    batch = await asyncio.wait_for(reading, 5)
    assert batch.known
