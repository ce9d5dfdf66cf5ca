"""Resuming a run that waited for approval, on this worker (DESIGN §4a).

Called by whichever worker records the last decision (`POST /api/v1/runs/<id>/approvals`) and by
every worker's supervisor for calls whose time ran out; the claim in the database lets exactly
one of them go on. The run then continues as a RunTask like any other: same run id, its frames
numbered on from the pause, its rows stored after the paused round's.
"""
import functools

from agents_app.runtime.context import RunContext
from agents_app.runtime.events import ToolCall
from agents_app.runtime.loop import DecidedCall
from agents_app.runtime.turn import turn_resume_stream
from chat_app.asyncdb import db_call
from chat_app.limits import StreamSlot, stream_slot_acquire, stream_slot_release
from chat_app.models import Run
from chat_app.runs.approvals import run_resume_claim
from chat_app.runs.engine import RunPlan, RunTask


def _slot_for(run_id) -> StreamSlot:
    """A stream slot for the resumed run; when the student has none free it runs without one
    (a person approved it: refusing now would lose the answer)."""
    user_id = Run.objects.filter(id=run_id).values_list("user_id", flat=True).first()
    slot = stream_slot_acquire(user_id=user_id) if user_id is not None else None
    return slot or StreamSlot(user_id=user_id or 0, released=True)


def _claim(run_id):
    slot = _slot_for(run_id)
    try:
        resumption = run_resume_claim(run_id=run_id, slot_key=slot.cache_key or "")
    except BaseException:
        stream_slot_release(slot=slot)
        raise
    if resumption is None:
        stream_slot_release(slot=slot)
    return resumption, slot


async def run_resume(*, run_id, campus_token: str | None = None) -> RunTask | None:
    """Starts the paused run `run_id` again here once every waiting call is decided; None when a
    call still waits or another worker resumed it first. `campus_token`: the deciding student's,
    for the sub-agents (None when the calls expired: nobody is there to lend one)."""
    resumption, slot = await db_call(_claim, run_id)
    if resumption is None:
        return None
    run = resumption.run
    ctx = RunContext(
        request_id=run.request_id,
        conversation_id=str(run.conversation_id),
        user_id=run.user_id,
        campus_token=campus_token,
        hint_domain=run.conversation.hint_domain or None,
    )
    decided = [DecidedCall(call_id=a.call_id, tool=a.tool, args=a.args, decision=a.status) for a in resumption.decided]
    plan = RunPlan(
        run=run,
        agent=resumption.agent,
        history=resumption.history,
        ctx=ctx,
        events=functools.partial(turn_resume_stream, state=resumption.state, decided=decided),
        resumed=tuple(ToolCall(call_id=a.call_id, tool=a.tool, args=a.args) for a in resumption.decided),
    )
    return RunTask(plan, slot=slot)
