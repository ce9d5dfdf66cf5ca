"""One task per worker (per event loop) that looks after runs (docs/design.md#runs).

Every RUN_HEARTBEAT_SEC it refreshes the heartbeat of this worker's active runs and saves the
reply text each has streamed but not yet stored (two statements, however many runs: at 1,000
held streams it is still one transaction every 2 s), on a database thread of its own, so that
a burst's admissions never hold it back past RUN_STALE_SEC. Every few beats it finishes as interrupted
the runs whose worker stopped heart-beating for RUN_STALE_SEC (a killed worker: its last
≤2 s of text are what is lost), and ends their log so that followers end; and it resumes the
waiting runs that can go on (their calls waited for approval past APPROVAL_TIMEOUT_SEC: rejected
by time). It listens on the run bus for stops and stops the runs it owns when asked. The moves
themselves are chat_app.runs.engine's. On SQLite each beat also copies the write-ahead log back
into the database file (campus_agent/base/sqlite_wal.py), so no turn's commit has to.

It is started by the first run or follower on a loop, and by the ASGI application on the first
request after a start (campus_agent.asgi), so a restarted worker recovers the runs its
predecessor left.
"""
import asyncio
import os
import weakref
from datetime import timedelta

from django.conf import settings
from django.utils import timezone
from loguru import logger

from campus_agent.base import sqlite_wal
from campus_agent.base.asyncdb import beat_db_call, db_call
from chat_app.models import Run
from chat_app.runs.bus import run_bus
from chat_app.runs.engine import checkpoint_lock, runs_reap_stale, runs_resume_ready, stop_apply
from chat_app.runs.state import WORKER_ID, local_runs, runs_heartbeat

REAP_EVERY_BEATS = 2
_tasks: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Task]" = weakref.WeakKeyDictionary()


def supervisor_ensure() -> None:
    """Starts this loop's supervisor unless it runs already (cheap; called on every request)."""
    loop = asyncio.get_running_loop()
    task = _tasks.get(loop)
    if task is None or task.done():
        _tasks[loop] = loop.create_task(_supervise(), name="run-supervisor")


def _other_workers_alive() -> bool:
    fresh = timezone.now() - timedelta(seconds=settings.RUN_STALE_SEC)
    return Run.objects.filter(status=Run.Status.RUNNING, heartbeat_at__gte=fresh).exclude(worker=WORKER_ID).exists()


async def _warn_without_redis() -> None:
    if run_bus().reaches_other_workers:
        return
    several = os.environ.get("WEB_CONCURRENCY", "1").strip() not in ("", "0", "1")
    if several or await db_call(_other_workers_alive):
        logger.warning(
            "several workers seem to serve this database without REDIS_URL: runs, stop and "
            "re-attach work only on the worker that runs them. Set REDIS_URL (docs/operations.md)."
        )


def _checkpoints() -> dict:
    changed = {}
    for run_id, task in list(local_runs.items()):
        if task.active:
            text = task.recorder.unsaved_text
            if text != task.checkpointed:
                changed[run_id] = text
    return changed


async def _beat() -> None:
    async with checkpoint_lock():
        changed = _checkpoints()
        active = [run_id for run_id, task in list(local_runs.items()) if task.active]
        # On its own thread: the liveness of this worker's runs must not wait for a burst's
        # admissions. The reaper's sweep stays on the shared threads: ending many runs of a dead
        # worker there must not delay this worker's next beat.
        await beat_db_call(runs_heartbeat, worker=WORKER_ID, checkpoints=changed, run_ids=active)
        for run_id, text in changed.items():
            task = local_runs.get(run_id)
            if task is not None:
                task.checkpointed = text
    # SQLite's log copied back here, not in the commit of whichever turn makes it long
    # (campus_agent/base/sqlite_wal.py): on the beat's thread, waiting for nobody.
    if sqlite_wal.in_use():
        await beat_db_call(sqlite_wal.wal_checkpoint)


async def _supervise() -> None:
    listener = asyncio.create_task(run_bus().listen(stop_apply))
    beats = 0
    try:
        try:
            await _warn_without_redis()
            await runs_reap_stale()  # a restarted worker finishes what its predecessor left, at once if stale
        except Exception:
            logger.exception("run supervisor start-up check failed")
        while True:
            await asyncio.sleep(settings.RUN_HEARTBEAT_SEC)
            beats += 1
            try:
                await _beat()
                if beats % REAP_EVERY_BEATS == 0:
                    await runs_reap_stale()
                    await runs_resume_ready()
            except Exception:
                logger.exception("run supervisor beat failed")
    finally:
        listener.cancel()
