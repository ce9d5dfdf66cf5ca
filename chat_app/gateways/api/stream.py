"""`POST /api/v1/chat`: admits a turn, starts its run, and follows it as SSE (DESIGN §4, §4a).

Not a DRF view: DRF views are sync and Django would buffer the whole stream. Everything that
can fail with a JSON answer (auth, then the body, limits, conversation ownership) is decided
before the first byte, with one crossing into sync code (services/admission.py). Then the run starts as a task
of its own (chat_app.runs.lifecycle.run_start) and this response is only its first follower: when the client
goes away the response ends, the run does not.
"""
import asyncio

from django.views.decorators.csrf import csrf_exempt
from loguru import logger

from campus_agent.base import errors
from campus_agent.base.sse import sse_response
from chat_app.runs.admission import Admission, achat_turn_admit
from chat_app.runs.follow import run_frames
from chat_app.runs.lifecycle import run_start


def _start_when_admitted(task: asyncio.Task, request_id: str) -> None:
    if task.cancelled() or task.exception() is not None:
        return  # nothing was admitted: no slot is held, no question stored
    logger.info("client left during admission; the run goes on without it")
    run_start(task.result(), request_id=request_id)


async def _admit(request) -> Admission:
    """Admission runs to its end even when the client leaves meanwhile (Django cancels the view on
    disconnect, but the sync call in its thread cannot be stopped half-way); a turn admitted so
    is run all the same: the question is stored, the run belongs to the server."""
    admitting = asyncio.ensure_future(achat_turn_admit(request=request, request_id=request.request_id))
    try:
        return await asyncio.shield(admitting)
    except asyncio.CancelledError:
        admitting.add_done_callback(lambda task: _start_when_admitted(task, request.request_id))
        raise


@csrf_exempt  # JWT calls need no CSRF token; the session path is checked in chat_caller_resolve
async def chat_stream(request):
    if request.method != "POST":
        response = errors.error_response(
            errors.ApiError(errors.MSG_METHOD, code=errors.METHOD_NOT_ALLOWED, status=405)
        )
        response["Allow"] = "POST"
        return response
    try:
        admission = await _admit(request)
    except errors.ApiError as exc:
        return errors.error_response(exc)
    run = run_start(admission, request_id=request.request_id)
    return sse_response(run_frames(run=run.run))
