"""`/api/v1/runs/<run_id>/…`: re-attach to a run's stream, stop a run, decide on a tool call
that waits for approval (DESIGN §4a).

Plain async views like the chat stream (a DRF view would buffer the stream). Same callers as
`POST /api/v1/chat`: a Bearer JWT, or the page's session (+ CSRF for the POST).
"""
import re

from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt

from campus_agent.json_body import JsonBodyRefused, json_object_read
from campus_agent.sse import sse_response
from chat_app import api_errors as errors
from chat_app.asyncdb import db_call
from chat_app.authentication import chat_caller_resolve
from chat_app.models import Run, ToolApproval
from chat_app.runs.approvals import ApprovalRefused, approval_decide
from chat_app.runs.engine import paused_run_end
from chat_app.runs.follow import run_frames
from chat_app.runs.redis_bus import control_publish, redis_client
from chat_app.runs.registry import local_runs
from chat_app.runs.resume import run_resume
from chat_app.runs.services import run_get, run_refresh

_SEQ = re.compile(r"[0-9]{1,9}")
MSG_RUN_NOT_FOUND = "运行不存在。"
MSG_AFTER = "Last-Event-ID / after 必须是非负整数。"
MSG_DECISION = 'decision 必须是 "approve" 或 "reject"。'
MSG_CALL_ID = "call_id 必须是非空字符串。"
MSG_NO_CALL = "这次运行没有这个等待批准的调用。"
MSG_DECIDED = "这个调用已经有结果（{status}），不能再决定。"
MSG_NOT_WAITING = "这次运行没有在等待批准。"
APPROVAL_CONFLICT = 40903
DECISIONS = {"approve": True, "reject": False}


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
    if run.status == Run.Status.AWAITING_APPROVAL or (local is not None and local.paused):
        if await paused_run_end(run.id, reason="stopped"):
            return JsonResponse({"status": "stopping"}, status=202)
        run = await db_call(run_refresh, run_id=run.id) or run  # resumed or ended meanwhile
        local = local_runs.get(run.id)
    if not run.active or (local is not None and not local.active and not local.paused):
        return JsonResponse({"status": "finished"}, status=200)
    if local is not None:
        local.stop()
    else:
        client = redis_client()
        if client is not None:
            await control_publish(client, op="stop", run_id=run.id)
        # Without Redis a run not in this process belongs to a dead one: the supervisor ends it.
    return JsonResponse({"status": "stopping"}, status=202)


class TooLate(Exception):
    """The decision came after the call's deadline: refused (409), and the run may go on now."""

    def __init__(self, error: errors.ApiError, *, run_id, campus_token: str | None):
        super().__init__(error.message)
        self.error, self.run_id, self.campus_token = error, run_id, campus_token


def _decision_read(request) -> tuple[str, bool]:
    body = json_object_read(request)
    call_id, decision = body.get("call_id"), body.get("decision")
    if not isinstance(call_id, str) or not call_id.strip() or len(call_id) > 128:
        raise errors.invalid_body(MSG_CALL_ID)
    if not isinstance(decision, str) or decision not in DECISIONS:
        raise errors.invalid_body(MSG_DECISION)
    return call_id, DECISIONS[decision]


def _decide(request, run_id) -> tuple[Run, str | None, ToolApproval]:
    """Sync: auth, the run (404), the body (400/413/415), the decision (404 / 409). Returns the
    run, the caller's campus token (for the sub-agents of the resumed run) and the decided call."""
    caller = chat_caller_resolve(request)
    run = run_get(user=caller.user, run_id=run_id)
    if run is None:
        raise errors.ApiError(MSG_RUN_NOT_FOUND, code=errors.NOT_FOUND, status=404)
    try:
        call_id, approve = _decision_read(request)
    except JsonBodyRefused as exc:
        raise errors.ApiError(exc.message, code=exc.code, status=exc.status) from None
    if run.status != Run.Status.AWAITING_APPROVAL:
        raise errors.ApiError(MSG_NOT_WAITING, code=APPROVAL_CONFLICT, status=409)
    try:
        approval = approval_decide(run=run, call_id=call_id, approve=approve)
    except ApprovalRefused as exc:
        if exc.reason == "no_call":
            raise errors.ApiError(MSG_NO_CALL, code=errors.NOT_FOUND, status=404) from None
        label = dict(ToolApproval.Status.choices).get(exc.status, exc.status)
        error = errors.ApiError(MSG_DECIDED.format(status=label), code=APPROVAL_CONFLICT, status=409)
        if exc.status == ToolApproval.Status.EXPIRED:
            raise TooLate(error, run_id=run.id, campus_token=caller.campus_token) from None
        raise error from None
    return run, caller.campus_token, approval


@csrf_exempt  # JWT calls need no CSRF token; the session path is checked in chat_caller_resolve
async def run_approvals(request, run_id):
    """`{"call_id": …, "decision": "approve" | "reject"}` → 200 `{"call_id", "status", "resumed"}`.
    The last decision of a pause resumes the run on this worker (any worker will do)."""
    if request.method != "POST":
        return _method_not_allowed("POST")
    try:
        run, campus_token, approval = await db_call(_decide, request, run_id)
    except TooLate as late:  # its time ran out: the run goes on without it (as the supervisor would)
        await run_resume(run_id=late.run_id, campus_token=late.campus_token)
        return errors.error_response(late.error)
    except errors.ApiError as exc:
        return errors.error_response(exc)
    resumed = await run_resume(run_id=run.id, campus_token=campus_token)
    return JsonResponse({"call_id": approval.call_id, "status": approval.status, "resumed": resumed is not None})
