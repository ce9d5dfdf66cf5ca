"""What a client reads of a run: `session`, the frames after a sequence number, live to `done`.

One loop over the run bus (chat_app.runs.bus), whichever bus it is and whoever runs the run.
Whatever happens, the client gets an end: a run whose log cannot give one (expired, or never on
this bus) ends with a `done` built from its stored reply. The database is read only when the
log says nothing for a while (is the run still going?) — never for frames.

A follower is a subscriber, not the run: when its client goes away Django cancels this
generator; nothing here catches that, and the run goes on (STYLE: "the response is a subscriber").
"""
import asyncio
from collections.abc import AsyncIterator

from django.conf import settings

from campus_agent.base.asyncdb import db_call
from campus_agent.base.sse import PING_FRAME, sse_frame
from chat_app.models import Run
from chat_app.runs.bus import run_bus
from chat_app.runs.state import run_refresh, run_stored_end
from chat_app.runs.wait import waiting_frames


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


async def _reload(run: Run) -> Run:
    """The run's row as it is now; a deleted one (its conversation was deleted) counts as ended."""
    fresh = await db_call(run_refresh, run_id=run.id)
    if fresh is None:
        run.status = Run.Status.INTERRUPTED
        return run
    return fresh


# How long a follower of a run that has ended waits for the rest of its log: the worker that ran
# it stores the reply, then appends `done`, and copies its last frames to Redis up to
# RUN_MIRROR_BATCH_SEC (and a drain of at most two seconds) later.
END_WAIT_MARGIN_SEC = 3.0


async def run_frames(*, run: Run, after: int = 0) -> AsyncIterator[bytes | str]:
    """`session`, then every frame with seq > `after`, live, ending with `done`.

    A run that waits for a person keeps its followers: they wait on its log, which whichever
    worker resumes it writes on. A follower with no log of a waiting run (after a restart, or
    it paused before this worker started) is shown what it waits for from the database.

    A run that has ended is followed to the end of its log, not only to what the log holds yet:
    its reply is stored before its last frames reach another worker (runs.redis_bus), and a
    `done` built from the stored reply at that moment would skip them. Only a log that is gone,
    or whose end does not come within END_WAIT_MARGIN_SEC + RUN_MIRROR_BATCH_SEC, is ended
    from the stored reply."""
    yield session_frame(run)
    bus = run_bus()
    ping_sec = settings.SSE_PING_SEC
    cursor, shown_waiting = after, False
    # A waiting run's log is looked at without waiting first: with none here, its cards come at once.
    look_first = run.status == Run.Status.WAITING
    loop = asyncio.get_running_loop()
    end_by = None  # the run has ended: when to stop waiting for its log's end
    while True:
        if end_by is not None:
            timeout = max(end_by - loop.time(), 0)
        else:
            timeout = 0 if look_first or not run.active else ping_sec
        look_first = False
        batch = await bus.read(run.id, after=cursor, timeout=timeout)
        if batch.frames:
            cursor = batch.last_seq
            yield batch.frames
            if batch.ended:
                return
            continue
        if not batch.ended and not run.active and batch.known and end_by is None:
            # Ended, and its log is there without its end yet: the end is on its way.
            end_by = loop.time() + END_WAIT_MARGIN_SEC + settings.RUN_MIRROR_BATCH_SEC
            continue
        if batch.ended or not run.active:  # nothing after the cursor (its `done` included)
            yield sse_frame(await db_call(run_stored_end, run=run))
            return
        if batch.live:  # this worker writes it: silent, not gone
            yield PING_FRAME
            continue
        run = await _reload(run)  # silent elsewhere for a while: still going?
        if not run.active:
            continue  # what the log still holds, then its end
        if run.status == Run.Status.WAITING and not batch.known and not shown_waiting:
            shown_waiting = True
            for payload in await db_call(waiting_frames, run=run):
                yield sse_frame(payload)  # no `id:` line: the numbered one is in a log this bus lacks
            continue
        if timeout:
            yield PING_FRAME
