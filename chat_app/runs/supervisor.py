"""One task per worker (per event loop) that looks after runs (DESIGN §4a).

Every RUN_HEARTBEAT_SEC it refreshes the heartbeat of this worker's active runs and saves the
reply text each has streamed but not yet stored (two statements, however many runs: at 1,000
held streams it is still one transaction every 2 s). Every few beats it finishes as interrupted
the runs whose worker stopped heart-beating for RUN_STALE_SEC (a killed worker: its last
≤2 s of text are what is lost), and closes their Redis log so that followers end; and it resumes
the runs whose calls waited for approval past APPROVAL_TIMEOUT_SEC (rejected by time). With Redis it
also listens on the control channel and stops the runs it owns when asked.

It is started by the first run or follower on a loop, and by the ASGI application on the first
request after a start (campus_agent.asgi), so a restarted worker recovers the runs its
predecessor left.
"""
import asyncio
import os
import uuid
import weakref
from datetime import timedelta

from django.conf import settings
from django.utils import timezone
from loguru import logger

from campus_agent.sse import sse_frame
from chat_app.asyncdb import db_call
from chat_app.models import Run
from chat_app.runs.approvals import approvals_expire
from chat_app.runs.redis_bus import control_listen, log_append_end, redis_client
from chat_app.runs.registry import WORKER_ID, local_runs
from chat_app.runs.services import run_stored_end, runs_heartbeat, runs_reap

REAP_EVERY_BEATS = 2
_tasks: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Task]" = weakref.WeakKeyDictionary()
_checkpoint_locks: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock]" = weakref.WeakKeyDictionary()


def checkpoint_lock() -> asyncio.Lock:
    """Orders a run's checkpoints and its round stores (this loop's lock): a heartbeat that read
    a run's unsaved text before a round took it must not write it after the round was stored,
    or a reaper would store that text twice."""
    loop = asyncio.get_running_loop()
    lock = _checkpoint_locks.get(loop)
    if lock is None:
        lock = _checkpoint_locks[loop] = asyncio.Lock()
    return lock


def supervisor_ensure() -> None:
    """Starts this loop's supervisor unless it runs already (cheap; called on every run start)."""
    loop = asyncio.get_running_loop()
    task = _tasks.get(loop)
    if task is None or task.done():
        _tasks[loop] = loop.create_task(_supervise(), name="run-supervisor")


def control_apply(op: str, run_id: str) -> None:
    """A control message for a run: acted on when this worker runs it, ignored otherwise."""
    try:
        task = local_runs.get(uuid.UUID(run_id))
    except ValueError:
        return
    if task is not None and op == "stop":
        task.stop()


def _other_workers_alive() -> bool:
    fresh = timezone.now() - timedelta(seconds=settings.RUN_STALE_SEC)
    return Run.objects.filter(status__in=Run.ACTIVE, heartbeat_at__gte=fresh).exclude(worker=WORKER_ID).exists()


async def _warn_without_redis() -> None:
    if settings.REDIS_URL:
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
        await db_call(runs_heartbeat, worker=WORKER_ID, checkpoints=changed)
        for run_id, text in changed.items():
            task = local_runs.get(run_id)
            if task is not None:
                task.checkpointed = text


async def _reap() -> None:
    reaped = await db_call(runs_reap, stale_sec=settings.RUN_STALE_SEC)
    client = redis_client()
    for run in reaped:
        if client is not None:
            payload = await db_call(run_stored_end, run=run)
            await log_append_end(client, run.id, lambda seq, p=payload: sse_frame(p, event_id=seq))


async def _expire() -> None:
    """Calls that waited for approval past their time count as rejected: their runs go on here
    (or on whichever worker claims them first)."""
    from chat_app.runs.resume import run_resume  # the engine imports this module

    for run_id in await db_call(approvals_expire):
        await run_resume(run_id=run_id)


async def _supervise() -> None:
    client = redis_client()
    listener = asyncio.create_task(control_listen(client, control_apply)) if client is not None else None
    beats = 0
    try:
        try:
            await _warn_without_redis()
            await _reap()  # a restarted worker finishes what its predecessor left, at once if stale
        except Exception:
            logger.exception("run supervisor start-up check failed")
        while True:
            await asyncio.sleep(settings.RUN_HEARTBEAT_SEC)
            beats += 1
            try:
                await _beat()
                if beats % REAP_EVERY_BEATS == 0:
                    await _reap()
                    await _expire()
            except Exception:
                logger.exception("run supervisor beat failed")
    finally:
        if listener is not None:
            listener.cancel()
