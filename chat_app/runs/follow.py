"""What a client reads of a run: `session`, the frames after a sequence number, live to `done`.

Three sources, best first: the memory log of the worker that runs the run (this one); the run's
Redis Stream (another worker runs it); the stored reply (the log expired, or no shared log).
Whichever it is, the client gets an end: a run whose log cannot give one ends with a `done`
built from the stored reply.

A follower is a subscriber, not the run: when its client goes away Django cancels this
generator; nothing here catches that, and the run goes on (STYLE: "the response is a subscriber").
"""
import asyncio
from collections.abc import AsyncIterator

from django.conf import settings

from agents_app.runtime.events import ApprovalRequired
from campus_agent.sse import PING_FRAME, sse_frame
from chat_app.asyncdb import db_call
from chat_app.models import Run
from chat_app.runs.approvals import approvals_pending
from chat_app.runs.redis_bus import log_read, log_replay, redis_client
from chat_app.runs.registry import local_runs
from chat_app.runs.services import run_refresh, run_stored_end

# Without a shared log, how often a follower of another process's run looks at its row.
POLL_SEC = 1.0
REDIS_BLOCK_SEC = 4.0


def session_frame(run: Run) -> str:
    return sse_frame(
        {
            "type": "session",
            "conversation_id": str(run.conversation_id),
            "message_id": str(run.message_id),
            "request_id": run.request_id,
            "run_id": str(run.id),
        }
    )


async def _stored_end(run: Run) -> str:
    return sse_frame(await db_call(run_stored_end, run=run))


async def _reload(run: Run) -> Run:
    """The run's row as it is now; a deleted one (its conversation was deleted) counts as ended."""
    fresh = await db_call(run_refresh, run_id=run.id)
    if fresh is None:
        run.status = Run.Status.INTERRUPTED
        return run
    return fresh


async def run_frames(*, run: Run, after: int = 0) -> AsyncIterator[str]:
    """`session`, then every frame with seq > `after`, live, ending with `done`.

    A run paused for approval keeps its followers: on this worker they wait on its log, which
    the run's resumption here appends to; with Redis, a follower of a paused log moves to the
    Stream, since the run may be resumed on any worker."""
    yield session_frame(run)
    ping_sec = settings.SSE_PING_SEC
    client = redis_client()
    local = local_runs.get(run.id)
    if local is not None and (client is None or after >= local.log.base):
        log = local.log
        async for text in log.follow(after=after, ping_sec=ping_sec, leave_when_paused=client is not None):
            yield text
        if not log.ended:  # paused, and the run may go on elsewhere: the Stream has what follows
            async for text in _follow_redis(client, run, max(after, log.last_seq), ping_sec):
                yield text
            return
        if after >= log.last_seq:  # a cursor at or past the log's end (its `done` included)
            yield await _stored_end(run)  # still gets an end
        return
    if client is not None:
        async for text in _follow_redis(client, run, after, ping_sec):
            yield text
        return
    async for text in _follow_database(run, after, ping_sec):
        yield text


async def _follow_redis(client, run: Run, after: int, ping_sec: float) -> AsyncIterator[str]:
    cursor = after
    silent = 0.0
    # Each XREAD blocks less than the client's socket timeout (redis-py's default is 5 s).
    block_sec = min(ping_sec, REDIS_BLOCK_SEC)
    while run.active:
        text, last, ended = await log_read(client, run.id, after=cursor, block_sec=block_sec)
        if text:
            cursor, silent = last, 0.0
            yield text
            if ended:
                return
            continue
        silent += block_sec
        if silent >= ping_sec:  # quiet for a while: still running? (a dead worker's run is ended
            silent = 0.0  # by the supervisor, which also closes its log; this covers a lost log)
            run = await _reload(run)
            if run.active:
                yield PING_FRAME
    # Ended: what the log still holds after the cursor, then its end (or one from the database).
    text, _, ended = await log_replay(client, run.id, after=cursor)
    if text:
        yield text
    if not ended:
        yield await _stored_end(run)


async def _follow_database(run: Run, after: int, ping_sec: float) -> AsyncIterator[str]:
    """No shared log and not ours: a run of another process (several workers without Redis, or
    one that died and waits for the supervisor), or one that paused for approval before this
    worker started. Its waiting calls are announced from the database; once it is resumed here,
    its frames follow; else wait for its end, then give the stored reply."""
    silent = 0.0
    announced = False
    while True:
        local = local_runs.get(run.id)
        if local is not None:  # resumed on this worker meanwhile (perhaps already ended)
            async for text in local.log.follow(after=max(after, local.log.base), ping_sec=ping_sec):
                yield text
            return
        if not run.active:
            break
        if run.status == Run.Status.AWAITING_APPROVAL and not announced:
            announced = True
            for approval in await db_call(approvals_pending, run=run):
                yield approval_frame(approval)
        await asyncio.sleep(POLL_SEC)
        run = await _reload(run)
        silent += POLL_SEC
        if run.active and silent >= ping_sec:
            silent = 0.0
            yield PING_FRAME
    yield await _stored_end(run)


def approval_frame(approval) -> str:
    """The `approval_required` frame of a waiting call, rebuilt from its row (no `id:` line: the
    numbered one is in a log this worker does not have)."""
    return sse_frame(
        ApprovalRequired(call_id=approval.call_id, tool=approval.tool, args=approval.args,
                         expires_at=approval.expires_at.isoformat()).frame()
    )
