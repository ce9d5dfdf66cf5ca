"""`POST /api/v1/chat`: admits a turn, starts its run, and follows it as SSE (docs/design.md#the-chat-stream).

Not a DRF view: DRF views are sync and Django would buffer the whole stream. Everything that can
fail with a JSON answer (who is calling, the body, then the limits, the conversation, the agent)
is decided before the first byte: the caller and the body here, the rest by the run's own task,
inside its lease (chat_app.runs.engine.run_start). This response is only the run's first
follower: when the client goes away the response ends, the run does not.
"""
import asyncio

from django.views.decorators.csrf import csrf_exempt

from campus_agent.base import errors
from campus_agent.base.sse import sse_response
from chat_app.accounts.authentication import achat_caller_resolve
from chat_app.models import Run
from chat_app.runs.chat_input import chat_input_read
from chat_app.runs.engine import run_start
from chat_app.runs.follow import run_frames


async def _admitted(request) -> Run:
    caller = await achat_caller_resolve(request)  # 401 / 403, before the body is read
    chat = chat_input_read(request=request)  # 415 / 413 / 400; the body is in memory already
    task = run_start(caller=caller, chat=chat, request_id=request.request_id)
    return await asyncio.shield(task.opened)


async def _admit(request) -> Run:
    """The admitted turn's run, or the ApiError that refused it. Admission runs to its end even when
    the client leaves meanwhile (Django cancels the view on disconnect, but a database call in its
    thread cannot be stopped half-way): a turn admitted so runs all the same, its question
    stored, the run the server's."""
    admitting = asyncio.ensure_future(_admitted(request))
    admitting.add_done_callback(lambda done: done.cancelled() or done.exception())  # read by nobody once left
    return await asyncio.shield(admitting)


@csrf_exempt  # JWT calls need no CSRF token; the session path is checked in chat_caller_resolve
async def chat_stream(request):
    if request.method != "POST":
        response = errors.error_response(
            errors.ApiError(errors.MSG_METHOD, code=errors.METHOD_NOT_ALLOWED, status=405)
        )
        response["Allow"] = "POST"
        return response
    try:
        run = await _admit(request)
    except errors.ApiError as exc:
        return errors.error_response(exc)
    return sse_response(run_frames(run=run))
