"""`/api/v1/runs/<run_id>/…`: re-attach to a run's stream, stop a run (DESIGN §4a).

Plain async views like the chat stream (a DRF view would buffer the stream). Same callers as
`POST /api/v1/chat`: a Bearer JWT, or the page's session (+ CSRF for the POST).
"""
import re

from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt

from campus_agent.sse import sse_response
from chat_app import api_errors as errors
from chat_app.asyncdb import db_call
from chat_app.authentication import chat_caller_resolve
from chat_app.models import Run
from chat_app.runs.follow import run_frames
from chat_app.runs.redis_bus import control_publish, redis_client
from chat_app.runs.registry import local_runs
from chat_app.runs.services import run_get

_SEQ = re.compile(r"[0-9]{1,9}")
MSG_RUN_NOT_FOUND = "运行不存在。"
MSG_AFTER = "Last-Event-ID / after 必须是非负整数。"


def _method_not_allowed(allowed: str) -> JsonResponse:
    response = errors.error_response(errors.ApiError(errors.MSG_METHOD, code=errors.METHOD_NOT_ALLOWED, status=405))
    response["Allow"] = allowed
    return response


def _caller_run(request, run_id) -> Run:
    """Sync: the caller (401/403 first) and their run (404 for anyone else's)."""
    caller = chat_caller_resolve(request)
    run = run_get(user=caller.user, run_id=run_id)
    if run is None:
        raise errors.ApiError(MSG_RUN_NOT_FOUND, code=errors.NOT_FOUND, status=404)
    return run


def _after(request) -> int:
    """The last frame the client has: `Last-Event-ID` (what EventSource sends), else `?after=N`."""
    raw = request.headers.get("Last-Event-ID")
    if raw is None:
        raw = request.GET.get("after", "0")
    raw = raw.strip()
    if not _SEQ.fullmatch(raw):
        raise errors.invalid_body(MSG_AFTER)
    return int(raw)


@csrf_exempt  # GET only; chat_caller_resolve checks nothing more for a safe method
async def run_events(request, run_id):
    if request.method != "GET":
        return _method_not_allowed("GET")
    try:
        after = _after(request)
        run = await db_call(_caller_run, request, run_id)
    except errors.ApiError as exc:
        return errors.error_response(exc)
    return sse_response(run_frames(run=run, after=after))


@csrf_exempt  # JWT calls need no CSRF token; the session path is checked in chat_caller_resolve
async def run_stop(request, run_id):
    if request.method != "POST":
        return _method_not_allowed("POST")
    try:
        run = await db_call(_caller_run, request, run_id)
    except errors.ApiError as exc:
        return errors.error_response(exc)
    local = local_runs.get(run.id)
    if not run.active or (local is not None and not local.active):
        return JsonResponse({"status": "finished"}, status=200)
    if local is not None:
        local.stop()
    else:
        client = redis_client()
        if client is not None:
            await control_publish(client, op="stop", run_id=run.id)
        # Without Redis a run not in this process belongs to a dead one: the supervisor ends it.
    return JsonResponse({"status": "stopping"}, status=202)
