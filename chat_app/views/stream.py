"""`POST /api/v1/chat`: a plain async view streaming the turn as SSE (DESIGN §4).

Not a DRF view: DRF views are sync and Django would buffer the whole stream. Everything that
can fail with a JSON answer (auth, body, limits, conversation ownership) is decided before the
first byte, in one sync call (services/admission.py); after that every failure is an `error`
frame followed by `done`.
"""
import uuid

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt
from loguru import logger

from agents_app.runtime.context import RunContext
from campus_agent.redaction import clip_text
from chat_app import api_errors as errors
from chat_app.asyncdb import db_call
from chat_app.chat_input import ChatInput, chat_input_parse
from chat_app.services.admission import chat_turn_admit
from chat_app.streaming import TurnPlan, TurnRun


def _chat_input(request) -> tuple[ChatInput | None, errors.ApiError | None]:
    """The parsed body, or the 400 to answer once the caller is known (401 comes first)."""
    try:
        return chat_input_parse(raw=request.body), None
    except RequestDataTooBig:
        return None, errors.invalid_body(errors.MSG_BODY_TOO_LARGE)
    except errors.ApiError as exc:
        return None, exc


async def _turn_prepare(request) -> TurnRun:
    chat, body_error = _chat_input(request)
    admission = await db_call(
        chat_turn_admit, request=request, chat=chat, body_error=body_error, request_id=request.request_id
    )
    start, caller = admission.start, admission.caller
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
