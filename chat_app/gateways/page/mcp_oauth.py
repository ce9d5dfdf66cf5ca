"""`GET /mcp/oauth/callback/`: where an MCP service's authorization server sends the student back
(settings.MCP_OAUTH_REDIRECT_URL; agents_app/mcp/oauth.py); and `GET
/mcp/oauth/client-metadata.json`, the gateway's client ID metadata document.

The student is signed in on the page (the session): the code is exchanged and the tokens stored
for them, then every call of their waiting runs that waited for this service goes on (on this
worker, admitted like a new turn), and the browser goes back to that conversation, where the
page follows the run as it continues. A student who said no at the authorization server
(`error=access_denied` …) has those calls declined instead: the model is told the account was
not connected. Whatever goes wrong shows a page that says what, never a 500.
"""
from django.contrib.auth.views import redirect_to_login
from django.http import Http404, HttpResponseRedirect, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_GET
from loguru import logger

from agents_app.mcp.oauth import (
    McpAuthorizationFailed,
    authorization_complete,
    authorization_declined,
    client_metadata_document,
)
from campus_agent.base import errors
from campus_agent.base.asyncdb import db_call
from chat_app.accounts.authentication import chat_caller_resolve
from chat_app.models import Run
from chat_app.runs.engine import run_answer
from chat_app.runs.wait import WaitRefused, authorization_waiting_calls

MAX_PARAM_CHARS = 4096  # a code or an issuer longer than this is not one
MSG_CONNECTED = _("已连接“{service}”账号。")
MSG_DECLINED = _("没有连接“{service}”账号，相关操作没有执行。")
MSG_EXPIRED = _("这个授权链接已失效（超时或已用过）。请回到对话，重新发起需要这个账号的问题。")
MSG_REFUSED = _("账号没有连接成功：授权服务器的答复无法通过校验。请回到对话重试。")


def _param(request, name: str) -> str | None:
    value = request.GET.get(name)
    return value if value is not None and len(value) <= MAX_PARAM_CHARS else None


def _page(request, *, message: str, ok: bool, status: int = 200, conversation_id=None):
    back = reverse("chat-conversation", args=[conversation_id]) if conversation_id else reverse("chat")
    return render(request, "chat/mcp_oauth.html", {"message": message, "ok": ok, "back": back}, status=status)


async def _answer_waiting(*, user_id: int, service_id: int, approve: bool, campus_token: str | None):
    """Answers every call of the student's waiting runs that waits for the service; the
    conversation of the first that went on (or was answered)."""
    conversation_id = None
    for run_id, call_id in await db_call(authorization_waiting_calls, user_id=user_id, service_id=service_id):
        run = await db_call(Run.objects.get, id=run_id)
        try:
            await run_answer(run=run, call_id=call_id, approve=approve, authorized=approve, campus_token=campus_token)
        except (WaitRefused, errors.ApiError) as exc:  # decided meanwhile, or no free slot: it waits on
            logger.info("MCP OAuth callback: run={} call={} not answered: {}", run_id, call_id, exc)
            continue
        conversation_id = conversation_id or run.conversation_id
    return conversation_id


async def mcp_oauth_callback(request):
    if request.method != "GET":
        return _page(request, message=MSG_EXPIRED, ok=False, status=405)
    try:
        caller = await db_call(chat_caller_resolve, request)
    except errors.ApiError:  # not signed in here (another browser): sign in, then come back
        return redirect_to_login(request.get_full_path())
    state = _param(request, "state") or ""
    user_id = caller.user.pk
    if request.GET.get("error"):  # the student (or the server) said no at the authorization page
        try:
            service = await authorization_declined(state=state, iss=_param(request, "iss"), user_id=user_id)
        except McpAuthorizationFailed as exc:
            return _page(request, message=MSG_EXPIRED if exc.reason == "expired" else MSG_REFUSED, ok=False,
                         status=400)
        conversation_id = await _answer_waiting(user_id=user_id, service_id=service.pk, approve=False,
                                                campus_token=caller.campus_token)
        return _page(request, message=MSG_DECLINED.format(service=service.label), ok=False,
                     conversation_id=conversation_id)
    try:
        service = await authorization_complete(state=state, code=_param(request, "code"), iss=_param(request, "iss"),
                                               user_id=user_id)
    except McpAuthorizationFailed as exc:
        return _page(request, message=MSG_EXPIRED if exc.reason == "expired" else MSG_REFUSED, ok=False, status=400)
    conversation_id = await _answer_waiting(user_id=user_id, service_id=service.pk, approve=True,
                                            campus_token=caller.campus_token)
    if conversation_id is not None:
        return HttpResponseRedirect(reverse("chat-conversation", args=[conversation_id]))
    return _page(request, message=MSG_CONNECTED.format(service=service.label), ok=True)


@require_GET
def mcp_oauth_client_metadata(request):
    """`GET /mcp/oauth/client-metadata.json`: the gateway's client ID metadata document, when
    MCP_OAUTH_CLIENT_METADATA_URL names this address (404 when it is not set)."""
    document = client_metadata_document()
    if document is None:
        raise Http404("未配置客户端元数据文档")
    response = JsonResponse(document)
    response["Cache-Control"] = "public, max-age=3600"
    return response
