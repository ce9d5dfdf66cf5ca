"""`POST /api/v1/chat`: a plain async view streaming the turn as SSE (DESIGN §4).

Not a DRF view: DRF views are sync and Django would buffer the whole stream. Everything that
can fail with a JSON answer (auth, then the body, limits, conversation ownership) is decided
before the first byte, in one sync call (services/admission.py); after that every failure is an
`error` frame followed by `done`.
"""
import asyncio
import uuid

from django.conf import settings
from django.http import StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt
from loguru import logger

from agents_app.runtime.context import RunContext
from campus_agent.redaction import clip_text
from chat_app import api_errors as errors
from chat_app.asyncdb import db_call, db_executor
from chat_app.limits import stream_slot_release
from chat_app.services.admission import Admission, chat_turn_admit
from chat_app.services.recording import TurnRecorder
from chat_app.services.turns import turn_store
from chat_app.streaming import TurnPlan, TurnRun


def _admission_abandon(admission: Admission, request_id: str) -> None:
    """The client left while its turn was being admitted: the question is stored and a stream
    slot is held, but no turn will run. Store the reply as interrupted (empty) and give the slot
    back, as a turn that ended would (sync, on a database thread)."""
    recorder = TurnRecorder()
    recorder.interrupt()
    try:
        turn_store(
            conversation_id=admission.start.conversation_id,
            final_message_id=uuid.uuid4(),
            rows=recorder.rows(),
            agent_name=admission.start.agent.name,
            request_id=request_id,
        )
    except Exception:
        logger.exception("storing the interrupted reply of an abandoned turn failed")
    finally:
        stream_slot_release(slot=admission.slot)


def _on_admitted_after_disconnect(task: asyncio.Task, request_id: str) -> None:
    if task.cancelled() or task.exception() is not None:
        return  # nothing was admitted: no slot is held
    logger.info("client left during admission; storing an interrupted reply")
    db_executor.submit(_admission_abandon, task.result(), request_id)


async def _admit(request) -> Admission:
    """Admission (auth, then the body, limits, storing the question) runs to its end even when the
    client leaves meanwhile (Django cancels the view on disconnect, but the sync call in its
    thread cannot be stopped half-way); its outcome is then wound up by `_admission_abandon`, so
    no slot or unanswered question is left behind."""
    admitting = asyncio.ensure_future(db_call(chat_turn_admit, request=request, request_id=request.request_id))
    try:
        return await asyncio.shield(admitting)
    except asyncio.CancelledError:
        admitting.add_done_callback(lambda task: _on_admitted_after_disconnect(task, request.request_id))
        raise


async def _turn_prepare(request) -> TurnRun:
    admission = await _admit(request)
    start, caller, chat = admission.start, admission.caller, admission.chat
    logger.info(
        "chat turn start user={} conversation={} agent={} history={} message={!r}",
        caller.user.pk, start.conversation_id, start.agent.slug, len(start.history), clip_text(chat.message),
    )
    ctx = RunContext(
        request_id=request.request_id,
        conversation_id=str(start.conversation_id),
        user_id=caller.user.pk,
        campus_token=caller.campus_token,
        hint_domain=start.hint_domain,
    )
    plan = TurnPlan(
        agent=start.agent,
        history=start.history,
        ctx=ctx,
        conversation_id=start.conversation_id,
        message_id=uuid.uuid4(),
        budget_sec=settings.TURN_BUDGET_SEC,
    )
    return TurnRun(plan, slot=admission.slot)


@csrf_exempt  # JWT calls need no CSRF token; the session path is checked in chat_caller_resolve
async def chat_stream(request):
    if request.method != "POST":
        response = errors.error_response(
            errors.ApiError(errors.MSG_METHOD, code=errors.METHOD_NOT_ALLOWED, status=405)
        )
        response["Allow"] = "POST"
        return response
    try:
        run = await _turn_prepare(request)
    except errors.ApiError as exc:
        return errors.error_response(exc)
    response = StreamingHttpResponse(run.frames(), content_type="text/event-stream; charset=utf-8")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response
