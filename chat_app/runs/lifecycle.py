"""A run's lifecycle, as the event loop sees it: one function per move (DESIGN §4a).

    run_start    admitted turn      → RUNNING here (a RunTask; it stores its own end or pause)
    run_answer   WAITING, answered  → RUNNING here (the last answer: a fresh lease, the quota)
    runs_resume_ready  WAITING, its time ran out / its answers are in → RUNNING here (supervisor)
    run_stop     RUNNING here → cancelled; RUNNING elsewhere → asked over the bus (or reaped
                 when its worker is dead); WAITING → INTERRUPTED; ended → nothing
    runs_reap    RUNNING, worker dead → INTERRUPTED (supervisor)

The database side of every move (the only code that writes `Run.status`, with the table of legal
moves) is chat_app.runs.state; the pause's is chat_app.runs.wait. Views call one of
these functions each; so does the supervisor. Whoever ends a run that no RunTask holds gives its
followers their `done` through the bus (`_ended_elsewhere`).
"""
import asyncio
import enum
import functools
import uuid
from datetime import timedelta

from django.conf import settings
from loguru import logger

from agents_app.runtime.context import RunContext
from agents_app.runtime.events import ToolCall
from agents_app.runtime.loop import DecidedCall
from agents_app.runtime.turn import turn_resume_stream
from campus_agent.base import errors
from campus_agent.base.asyncdb import db_call
from campus_agent.base.redaction import clip_text
from chat_app.models import Run
from chat_app.runs.admission import Admission, resume_admit
from chat_app.runs.bus import run_bus
from chat_app.runs.engine import RunPlan, RunTask
from chat_app.runs.quota import QUOTA_EXCEEDED
from chat_app.runs.state import local_runs, run_is_stale, run_reap, run_refresh, run_stored_end, runs_reap
from chat_app.runs.wait import PAUSE_KINDS, Decision, Resumption, approval_decide, waiting_run_close, waiting_runs_ready


class StopOutcome(enum.Enum):
    STOPPING = "stopping"  # cancelled here, asked of its worker, or ended (it waited / its worker died)
    FINISHED = "finished"  # it had already ended
    UNREACHABLE = "unreachable"  # another worker runs it and this bus cannot reach it (no Redis)


async def _ended_elsewhere(run: Run) -> None:
    """Followers of a run ended by its row alone (reaped, or closed while it waited) get its end."""
    payload = await db_call(run_stored_end, run=run)
    await run_bus().end_with(run.id, payload, base=run.frames_seq)


def run_start(admission: Admission, *, request_id: str) -> RunTask:
    """An admitted turn starts running here; the runs its question ended while they waited for a
    person (admission closed them) give their followers their end."""
    start, caller = admission.start, admission.caller
    logger.info(
        "chat turn start user={} conversation={} run={} agent={} history={} message={!r}",
        caller.user.pk, start.conversation_id, start.run.id, start.agent.slug, len(start.history),
        clip_text(admission.chat.message),
    )
    ctx = RunContext(
        request_id=request_id,
        conversation_id=str(start.conversation_id),
        user_id=caller.user.pk,
        campus_token=caller.campus_token,
        hint_domain=start.hint_domain,
        language=admission.chat.language,
    )
    task = RunTask(RunPlan(run=start.run, agent=start.agent, history=start.history, ctx=ctx), lease=admission.lease)
    for closed in start.closed_runs:
        _background(_ended_elsewhere(closed))
    return task


def _resumed(resumption: Resumption, *, campus_token: str | None) -> RunTask:
    run = resumption.run
    ctx = RunContext(
        request_id=run.request_id,
        conversation_id=str(run.conversation_id),
        user_id=run.user_id,
        campus_token=campus_token,
        hint_domain=run.conversation.hint_domain or None,
        language=run.language or None,
    )
    decided = [DecidedCall(call_id=a.call_id, tool=a.tool, args=a.args, decision=a.status, kind=a.kind,
                           answers=resumption.answers.get(a.call_id, ()))
               for a in resumption.decided]
    plan = RunPlan(
        run=run,
        agent=resumption.agent,
        history=resumption.history,
        ctx=ctx,
        events=functools.partial(turn_resume_stream, state=resumption.state, decided=decided),
        resumed=tuple(ToolCall(call_id=a.call_id, tool=a.tool, args=a.args) for a in resumption.decided),
    )
    return RunTask(plan, lease=resumption.lease)


async def run_answer(*, run: Run, call_id: str, approve: bool, campus_token: str | None,
                     authorized: bool = False, answer: dict | None = None) -> tuple[Decision, bool]:
    """Records the student's answer to one call the run waits on; the answer that completes the
    pause admits the run again (a lease, the quota: ApiError 429 when refused, nothing recorded)
    and resumes it here. Returns the decision and whether the run goes on now. Raises
    ApprovalRefused. `campus_token`: the answering student's, for the sub-agents; `authorized`:
    the answer is the student's authorization of the call's service (the OAuth callback);
    `answer`: their answer to what the call's server asked ({action, content})."""
    decision = await db_call(approval_decide, run_id=run.id, call_id=call_id, approve=approve, lease_take=resume_admit,
                             authorized=authorized, answer=answer)
    if decision.late:  # its time had run out: the run goes on without it, as the supervisor would
        await _resume_ready(run.id, kind=run.pause_kind, campus_token=campus_token)
        return decision, False
    if decision.resumption is None:
        return decision, False
    _resumed(decision.resumption, campus_token=campus_token)
    return decision, True


async def _resume_ready(run_id, *, kind: str, campus_token: str | None = None) -> RunTask | None:
    """Resumes a waiting run whose answers are in (or whose time ran out) here, admitted like a
    new turn. A student with no free slot: it waits for the next sweep. Over the daily quota: it
    cannot go on today, and is ended (its calls stored as not run)."""
    try:
        resumption = await db_call(PAUSE_KINDS[kind].resume_claim, run_id=run_id, lease_take=resume_admit)
    except errors.ApiError as refused:
        if refused.code != QUOTA_EXCEEDED:
            return None
        closed = await db_call(waiting_run_close, run_id=run_id, reason="quota")
        if closed is not None:
            await _ended_elsewhere(closed)
        return None
    return _resumed(resumption, campus_token=campus_token) if resumption is not None else None


async def runs_resume_ready() -> None:
    """The supervisor's sweep: every waiting run that can go on now goes on (on whichever worker
    claims it first)."""
    for kind, run_id in await db_call(waiting_runs_ready):
        await _resume_ready(run_id, kind=kind)


async def runs_reap_stale() -> list[Run]:
    """The supervisor's sweep: runs whose worker died are ended as interrupted."""
    reaped = await db_call(runs_reap, stale_sec=settings.RUN_STALE_SEC)
    for run in reaped:
        await _ended_elsewhere(run)
    return reaped


async def run_stop(*, run: Run) -> StopOutcome:
    """Stops the run, whatever its state and wherever it runs (DESIGN §4a)."""
    local = local_runs.get(run.id)
    if local is not None:
        if local.stop():
            return StopOutcome.STOPPING
        await local.settled()  # storing its end or its pause: look again once it has
    run = await db_call(run_refresh, run_id=run.id) or run
    if run.status == Run.Status.WAITING:
        closed = await db_call(waiting_run_close, run_id=run.id, reason="stopped")
        if closed is not None:
            await _ended_elsewhere(closed)
            return StopOutcome.STOPPING
        run = await db_call(run_refresh, run_id=run.id) or run  # resumed meanwhile (perhaps here)
        local = local_runs.get(run.id)
        if local is not None and local.stop():
            return StopOutcome.STOPPING
    if not run.active:
        return StopOutcome.FINISHED
    if await run_bus().stop_publish(run.id):
        return StopOutcome.STOPPING
    # No bus to its worker: a dead worker's run is ended here and now; a live one is out of reach.
    if run_is_stale(run=run, stale_sec=settings.RUN_STALE_SEC):
        # Claimed only if it has not beaten since it was read (a worker that came back wins).
        if await db_call(run_reap, run=run, stale_before=run.heartbeat_at + timedelta(microseconds=1)):
            await _ended_elsewhere(await db_call(run_refresh, run_id=run.id) or run)
        return StopOutcome.STOPPING
    return StopOutcome.UNREACHABLE


def stop_apply(run_id: str) -> None:
    """A stop asked over the bus: acted on when this worker runs the run, ignored otherwise."""
    try:
        task = local_runs.get(uuid.UUID(run_id))
    except ValueError:
        return
    if task is not None:
        task.stop()


_background_tasks: set = set()


def _background(coro) -> None:
    task = asyncio.ensure_future(coro)
    _background_tasks.add(task)  # the loop keeps only weak references
    task.add_done_callback(_background_tasks.discard)
