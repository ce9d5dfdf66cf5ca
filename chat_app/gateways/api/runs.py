"""`/api/v1/runs/<run_id>/…`: re-attach to a run's stream, stop a run, decide on a tool call
that waits for approval (docs/design.md#runs) or answer what its MCP server asked (an elicitation).

Plain async views like the chat stream (a DRF view would buffer the stream). Same callers as
`POST /api/v1/chat`: a Bearer JWT, or the page's session (+ CSRF for the POST).
"""
import re

from django.conf import settings
from django.http import JsonResponse
from django.utils.translation import gettext_lazy as _
from django.views.decorators.csrf import csrf_exempt

from campus_agent.base import errors
from campus_agent.base.asyncdb import db_call
from campus_agent.base.json_body import JsonBodyRefused, json_object_read
from campus_agent.base.sse import sse_response
from chat_app.accounts.authentication import Caller, chat_caller_resolve
from chat_app.models import Run, Wait
from chat_app.runs.engine import StopOutcome, run_answer, run_stop
from chat_app.runs.follow import run_frames
from chat_app.runs.lease import FollowerLease, follower_lease_take
from chat_app.runs.state import run_get
from chat_app.runs.wait import ANSWER_ACTIONS, WaitRefused

_SEQ = re.compile(r"[0-9]{1,9}")
MSG_RUN_NOT_FOUND = _("运行不存在。")
MSG_AFTER = _("Last-Event-ID / after 必须是非负整数。")
MSG_DECISION = _('decision 必须是 "approve" 或 "reject"。')
MSG_CALL_ID = _("call_id 必须是非空字符串。")
MSG_NO_CALL = _("这次运行没有这个等待批准的调用。")
MSG_DECIDED = _("这个调用已经有结果（{status}），不能再决定。")
MSG_NOT_WAITING = _("这次运行没有在等待批准。")
MSG_AUTHORIZE = _("这个调用等待你连接账号：打开授权页面完成授权后会自动继续；不想连接请选择拒绝。")
MSG_ACTION = _('action 必须是 "accept"、"decline" 或 "cancel"。')
MSG_CONTENT = _("content 必须是 JSON 对象（表单各字段的值）。")
MSG_ANSWER_NEEDED = _("这个调用在等你回答服务提出的问题：请用 action（accept / decline / cancel）和 content 回答。")
MSG_NO_QUESTION = _("这个调用没有在等你回答问题：请用 decision（approve / reject）决定。")
MSG_ANSWER_UNFIT = _("回答不符合服务的表单：{problem}")
MSG_RUN_UNREACHABLE = _("这次运行在另一个服务进程上，未配置 REDIS_URL 时无法从这里停止。")
APPROVAL_CONFLICT = 40903
RUN_UNREACHABLE = 40904
DECISIONS = {"approve": True, "reject": False}


def _method_not_allowed(allowed: str) -> JsonResponse:
    response = errors.error_response(errors.ApiError(errors.MSG_METHOD, code=errors.METHOD_NOT_ALLOWED, status=405))
    response["Allow"] = allowed
    return response


def _caller_run(request, run_id) -> tuple[Caller, Run]:
    """Sync: the caller (401/403 first) and their run (404 for anyone else's)."""
    caller = chat_caller_resolve(request)
    run = run_get(user=caller.user, run_id=run_id)
    if run is None:
        raise errors.ApiError(MSG_RUN_NOT_FOUND, code=errors.NOT_FOUND, status=404)
    return caller, run


def _after(request) -> int:
    """The last frame the client has: `Last-Event-ID` (what EventSource sends), else `?after=N`."""
    raw = request.headers.get("Last-Event-ID")
    if raw is None:
        raw = request.GET.get("after", "0")
    raw = raw.strip()
    if not _SEQ.fullmatch(raw):
        raise errors.invalid_body(MSG_AFTER)
    return int(raw)


def _follower_admit(request, run_id) -> tuple[Run, FollowerLease]:
    """Sync: the caller's run (401/403/404 first) and a follower lease, or 429 (42905) when the
    user already holds RUN_MAX_FOLLOWERS_PER_USER followers (one user held 1,000: issue 20)."""
    caller, run = _caller_run(request, run_id)
    lease = follower_lease_take(user_id=caller.user.pk)
    if lease is None:
        limit = settings.RUN_MAX_FOLLOWERS_PER_USER
        raise errors.ApiError(errors.MSG_TOO_MANY_FOLLOWERS.format(limit=limit), code=errors.TOO_MANY_FOLLOWERS,
                              status=429, headers={"Retry-After": "5"})
    return run, lease


async def _followed(frames, lease: FollowerLease):
    """The follower's frames; its lease is given back when the response ends, however it ends
    (done, the client gone: Django cancels this generator)."""
    try:
        async for frame in frames:
            yield frame
    finally:
        await lease.release()


@csrf_exempt  # GET only; chat_caller_resolve checks nothing more for a safe method
async def run_events(request, run_id):
    if request.method != "GET":
        return _method_not_allowed("GET")
    try:
        after = _after(request)
        run, lease = await db_call(_follower_admit, request, run_id)
    except errors.ApiError as exc:
        return errors.error_response(exc)
    return sse_response(_followed(run_frames(run=run, after=after), lease))


@csrf_exempt  # JWT calls need no CSRF token; the session path is checked in chat_caller_resolve
async def run_stop_view(request, run_id):
    """202 `{"status": "stopping"}`; 200 `{"status": "finished"}` when it had ended; 409 (40904)
    when another worker runs it and no Redis reaches that worker."""
    if request.method != "POST":
        return _method_not_allowed("POST")
    try:
        _, run = await db_call(_caller_run, request, run_id)
    except errors.ApiError as exc:
        return errors.error_response(exc)
    outcome = await run_stop(run=run)
    if outcome is StopOutcome.UNREACHABLE:
        return errors.error_response(errors.ApiError(MSG_RUN_UNREACHABLE, code=RUN_UNREACHABLE, status=409))
    if outcome is StopOutcome.FINISHED:
        return JsonResponse({"status": "finished"}, status=200)
    return JsonResponse({"status": "stopping"}, status=202)


def _decision_read(request) -> tuple[str, bool, dict | None]:
    """(call id, approve, answer): `{"call_id", "decision"}` for an approval or an authorization,
    `{"call_id", "action", "content"}` for a question of the call's server (an elicitation)."""
    try:
        body = json_object_read(request)
    except JsonBodyRefused as exc:
        raise errors.ApiError(exc.message, code=exc.code, status=exc.status) from None
    call_id = body.get("call_id")
    if not isinstance(call_id, str) or not call_id.strip() or len(call_id) > 128:
        raise errors.invalid_body(MSG_CALL_ID)
    if "action" in body:
        action, content = body.get("action"), body.get("content")
        if not isinstance(action, str) or action not in ANSWER_ACTIONS:
            raise errors.invalid_body(MSG_ACTION)
        if action == "accept" and content is not None and not isinstance(content, dict):
            raise errors.invalid_body(MSG_CONTENT)
        return call_id, action == "accept", {"action": action, "content": content if action == "accept" else None}
    decision = body.get("decision")
    if not isinstance(decision, str) or decision not in DECISIONS:
        raise errors.invalid_body(MSG_DECISION)
    return call_id, DECISIONS[decision], None


def _decision_request(request, run_id) -> tuple[Caller, Run, str, bool, dict | None]:
    """Sync: auth, the run (404), the body (400/413/415)."""
    caller, run = _caller_run(request, run_id)
    return caller, run, *_decision_read(request)


def _refusal(exc: WaitRefused) -> errors.ApiError:
    if exc.reason == "not_waiting":
        return errors.ApiError(MSG_NOT_WAITING, code=APPROVAL_CONFLICT, status=409)
    if exc.reason == "no_call":
        return errors.ApiError(MSG_NO_CALL, code=errors.NOT_FOUND, status=404)
    if exc.reason == "authorize":
        return errors.ApiError(MSG_AUTHORIZE, code=APPROVAL_CONFLICT, status=409)
    if exc.reason == "answer_needed":
        return errors.ApiError(MSG_ANSWER_NEEDED, code=APPROVAL_CONFLICT, status=409)
    if exc.reason == "no_question":
        return errors.ApiError(MSG_NO_QUESTION, code=APPROVAL_CONFLICT, status=409)
    if exc.reason == "answer":
        return errors.invalid_body(MSG_ANSWER_UNFIT.format(problem=exc.problem))
    label = dict(Wait.Status.choices).get(exc.status, exc.status)
    return errors.ApiError(MSG_DECIDED.format(status=label), code=APPROVAL_CONFLICT, status=409)


@csrf_exempt  # JWT calls need no CSRF token; the session path is checked in chat_caller_resolve
async def run_approvals(request, run_id):
    """`{"call_id": …, "decision": "approve" | "reject"}`, or for a call whose server asked the
    student something `{"call_id": …, "action": "accept" | "decline" | "cancel", "content": {…}}`
    → 200 `{"call_id", "status", "resumed"}`. The last decision of a pause resumes the run on
    this worker (any worker will do), admitted like a new turn: 429 (42901 / 42904) when the
    student has no free stream or no quota left, and then nothing is recorded (the run still
    waits)."""
    if request.method != "POST":
        return _method_not_allowed("POST")
    try:
        caller, run, call_id, approve, answer = await db_call(_decision_request, request, run_id)
        decision, resumed = await run_answer(run=run, call_id=call_id, approve=approve,
                                             campus_token=caller.campus_token, answer=answer)
    except WaitRefused as exc:
        return errors.error_response(_refusal(exc))
    except errors.ApiError as exc:
        return errors.error_response(exc)
    if decision.late:
        return errors.error_response(_refusal(WaitRefused("decided", Wait.Status.EXPIRED)))
    wait = decision.wait
    return JsonResponse({"call_id": wait.call_id, "status": wait.status, "resumed": resumed})
