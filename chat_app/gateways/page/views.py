"""The student chat page (server-rendered). Streaming itself goes through POST /api/v1/chat.

The page renders its first state (the user's conversations, the enabled agents, the open
conversation's stored messages) on the server, so a reload shows the stored history without
waiting for an API round trip; the browser script only adds what streams in afterwards.
"""
from django.conf import settings
from django.contrib.auth import login
from django.contrib.auth import views as auth_views
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.decorators import login_required
from django.db.models import Q
from django.http import (
    Http404,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponsePermanentRedirect,
    HttpResponseRedirect,
)
from django.shortcuts import render
from django.templatetags.static import static
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_http_methods, require_POST, require_safe
from loguru import logger

from agents_app.access import agents_for, audience_of
from audit_app.chain import Event, Outcome, audit_record
from chat_app.accounts import cas, oidc
from chat_app.accounts.login_forms import LoginForm
from chat_app.accounts.sessions import SsoUnavailable, sso_user_upsert
from chat_app.conversations.selectors import (
    conversation_get,
    conversation_list,
    feedback_by_answer,
    message_list,
)
from chat_app.gateways.catalog import agent_catalogs, agent_display_name, tool_labels
from chat_app.models import CampusIdentity, Conversation, Message, Preference, Run
from chat_app.runs.chat_input import MESSAGE_MAX
from chat_app.runs.state import run_active_get
from safety_app.models import REPORT_DETAIL_MAX, AnswerReport
from safety_app.reports import reports_by_answer

SIDEBAR_LIMIT = 100  # the sidebar is a recent list, not an archive
HISTORY_LIMIT = 500  # rows shown for one conversation; older ones stay in the database
MESSAGE_FIELDS = ("id", "role", "content", "meta", "chart", "created_at", "superseded")


def _stored_messages(*, conversation: Conversation, active_run: Run | None) -> list[dict]:
    messages = message_list(conversation=conversation)
    if active_run is not None:
        # The run in progress is replayed whole by re-attaching (its finished tool rounds are
        # stored already): show only its question here, not the same rounds twice. (Rows stored
        # before the run began with the same request id are a client's opening: shown.)
        messages = messages.exclude(Q(request_id=active_run.request_id) & ~Q(role=Message.Role.USER)
                                    & Q(created_at__gte=active_run.started_at))
    rows = list(messages.reverse().values(*MESSAGE_FIELDS)[:HISTORY_LIMIT])
    rows.reverse()
    # A window that starts at a tool row would show a chip without its call: start at a turn.
    while rows and rows[0]["role"] != "user":
        rows.pop(0)
    return rows


def _selected_agent(*, agents: list[dict], conversation: Conversation | None) -> str | None:
    slugs = [a["slug"] for a in agents]
    if conversation is not None and conversation.agent is not None and conversation.agent.slug in slugs:
        return conversation.agent.slug
    return slugs[0] if slugs else None  # agents_for() puts the default first


@login_required
def chat_page(request, conversation_id=None):
    """`/` (a new conversation) and `/c/<id>/` (a stored one of the signed-in user; 404 otherwise)."""
    conversation = None
    if conversation_id is not None:
        conversation = conversation_get(user=request.user, conversation_id=conversation_id)
        if conversation is None:
            raise Http404("对话不存在")
    audience = audience_of(user=request.user)
    enabled_agents = agents_for(audience=audience)  # only those the student's groups may use
    agents = [{"slug": a.slug, "name": agent_display_name(a.name)} for a in enabled_agents]
    active_run = run_active_get(conversation_id=conversation.id) if conversation else None
    state = {
        "conversation_id": str(conversation.id) if conversation else None,
        "agent": _selected_agent(agents=agents, conversation=conversation),
        "messages": _stored_messages(conversation=conversation, active_run=active_run) if conversation else [],
        # The page re-attaches to an answer still being written (docs/design.md#runs).
        "active_run_id": str(active_run.id) if active_run else None,
        "feedback": feedback_by_answer(user=request.user, conversation=conversation) if conversation else {},
        # The student's reports of answers here (answer id → status), and the reasons the report
        # dialog offers, in the student's language (docs/safety.md#reports-举报).
        "reports": reports_by_answer(user=request.user, conversation_id=conversation.id) if conversation else {},
        "report_reasons": [[value, str(label)] for value, label in AnswerReport.Reason.choices],
        "report_detail_max": REPORT_DETAIL_MAX,
        "tools": tool_labels(audience=audience),
        "catalogs": agent_catalogs(agents=enabled_agents, audience=audience),
        "message_max": MESSAGE_MAX,
        # Which agents' models see attached images (the page warns on an image for the others).
        "reads_images": {agent.slug: agent.reads_images() for agent in enabled_agents},
        "attachments_max": settings.UPLOAD_MAX_PER_MESSAGE,
        # Where the page sends a student whose campus token expired (40102); null: not configured.
        "campus_login_url": reverse("campus-login") if oidc.campus_login_enabled() else None,
    }
    context = {
        "conversations": conversation_list(user=request.user).values("id", "title", "updated_at")[:SIDEBAR_LIMIT],
        "agents": agents,
        "conversation": conversation,
        "state": state,
    }
    return render(request, "chat/page.html", context)


@require_safe
def favicon(request):
    """`/favicon.ico`, which browsers and other clients ask for whatever a page links (an image
    opened alone, a bookmark, a feed reader): the site's icon, not a 404 line in the log."""
    return HttpResponsePermanentRedirect(static("img/logo.svg"))


MSG_CAMPUS_LOGIN_FAILED = "校园账号登录没有完成，请重试。"
MSG_CAMPUS_LOGIN_UNAVAILABLE = "校园统一身份认证暂时不可用，请稍后重试，或使用学号和密码登录。"
MSG_CAMPUS_ACCOUNT_DISABLED = "这个校园账号在本系统中已停用，请联系管理员。"


MODEL_BACKEND = f"{ModelBackend.__module__}.{ModelBackend.__qualname__}"


def _login_context(request, **extra) -> dict:
    return {
        "campus_login": oidc.campus_login_enabled(),
        "campus_login_label": settings.OIDC_LOGIN_LABEL,
        "cas_login": cas.cas_login_enabled(),
        **extra,
    }


def _safe_next(request, candidate: str | None) -> str:
    if candidate and url_has_allowed_host_and_scheme(
        candidate, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return candidate
    return reverse("chat")


def _campus_login_refused(request, message: str, status: int, *, reason: str, username: str = "", via: str = "oidc"):
    """A campus login (OIDC or CAS) refused: audited (docs/staff.md#the-audit-log), then the login
    page says why."""
    audit_record(event=Event.SIGN_IN, outcome=Outcome.REFUSED, request=request, actor_username=username,
                 target=via, details={"via": via, "reason": reason})
    return _campus_login_error(request, message, status)


def _campus_login_error(request, message: str, status: int):
    context = _login_context(request, campus_error=message, next=reverse("chat"), form=LoginForm(request))
    return render(request, "registration/login.html", context, status=status)


@require_GET
def campus_login(request):
    """`/login/campus/?next=…`: off to the campus provider (authorization code + PKCE)."""
    if not oidc.campus_login_enabled():
        raise Http404("未配置校园账号登录")
    next_url = _safe_next(request, request.GET.get("next"))
    try:
        url = oidc.login_begin(
            session=request.session,
            redirect_uri=request.build_absolute_uri(reverse("campus-callback")),
            next_url=next_url,
        )
    except oidc.CampusLoginFailed:
        return _campus_login_error(request, MSG_CAMPUS_LOGIN_UNAVAILABLE, 502)
    return HttpResponseRedirect(url)


@require_GET
def campus_callback(request):
    """`/login/campus/callback/`: the provider sends the student back with a code; the campus
    `sub` logs in as its linked user (created on the first login, as /api/v1/auth/sso does)."""
    if not oidc.campus_login_enabled():
        raise Http404("未配置校园账号登录")
    if "error" in request.GET or "code" not in request.GET:  # the student declined, or the provider refused
        request.session.pop(oidc.FLOW_KEY, None)
        return _campus_login_refused(request, MSG_CAMPUS_LOGIN_FAILED, 400, reason="provider_refused")
    try:
        done = oidc.login_finish(session=request.session, state=request.GET.get("state", ""), code=request.GET["code"])
        user = sso_user_upsert(profile=done.profile)
    except oidc.CampusLoginFailed as exc:
        return _campus_login_refused(request, exc.message or MSG_CAMPUS_LOGIN_FAILED, 400, reason="login_failed")
    except SsoUnavailable:
        return _campus_login_refused(request, MSG_CAMPUS_LOGIN_FAILED, 400, reason="unavailable")
    if not user.is_active:
        return _campus_login_refused(request, MSG_CAMPUS_ACCOUNT_DISABLED, 403, reason="inactive",
                                     username=user.get_username())
    login(request, user, backend=MODEL_BACKEND)
    oidc.tokens_store(session=request.session, tokens=done.tokens)  # after login(): it cycles the session
    logger.info("page login via campus OIDC user={}", user.pk)
    return language_cookie_restore(HttpResponseRedirect(_safe_next(request, done.next_url)), user)


@csrf_exempt  # the CAS server's single-logout POST carries no CSRF token; GET changes nothing before the ticket
@require_http_methods(["GET", "POST"])
def cas_login(request):
    """`GET /accounts/cas/login/?next=…`: off to the CAS server (统一身份认证), which sends the
    student back here with `ticket=ST-…`: validated at CAS_SERVER_URL for this service, the
    student / staff number logs in as its linked user (chat_app/accounts/cas.py). `POST` with
    `logoutRequest`: the CAS server's single logout, ending the session that ticket opened."""
    if not cas.cas_login_enabled():
        raise Http404("未配置统一身份认证")
    if request.method == "POST":
        logout_request = request.POST.get("logoutRequest", "")
        if not logout_request:
            return HttpResponseBadRequest("logoutRequest missing")
        cas.single_logout(logout_request=logout_request, request=request)
        return HttpResponse("ok\n", content_type="text/plain")
    ticket = request.GET.get("ticket")
    if ticket is None:
        next_url = _safe_next(request, request.GET.get("next"))
        if request.user.is_authenticated:
            return HttpResponseRedirect(next_url)
        return HttpResponseRedirect(cas.login_begin(request=request, next_url=next_url))
    try:
        profile, next_url = cas.ticket_validate(request=request, ticket=ticket)
        user = sso_user_upsert(profile=profile, source=CampusIdentity.Source.CAS)
    except cas.CasLoginFailed as exc:
        return _campus_login_refused(request, exc.message or MSG_CAMPUS_LOGIN_FAILED, 400, reason="login_failed",
                                     via="cas")
    except SsoUnavailable:
        return _campus_login_refused(request, MSG_CAMPUS_LOGIN_FAILED, 400, reason="unavailable", via="cas")
    if not user.is_active:
        return _campus_login_refused(request, MSG_CAMPUS_ACCOUNT_DISABLED, 403, reason="inactive",
                                     username=user.get_username(), via="cas")
    login(request, user, backend=MODEL_BACKEND)
    cas.session_ticket_record(session=request.session, ticket=ticket)  # after login(): it cycles the session
    logger.info("page login via CAS user={}", user.pk)
    return language_cookie_restore(HttpResponseRedirect(_safe_next(request, next_url)), user)


class LogoutPage(auth_views.LogoutView):
    """`POST /logout/` (and `POST /accounts/cas/logout/`): a campus login's tokens are revoked at
    the provider first; a CAS login's session then goes on to the CAS server's logout, which ends
    the campus sign-on too."""

    def post(self, request, *args, **kwargs):
        oidc.session_tokens_revoke(session=request.session)
        from_cas = cas.session_logout_begin(session=request.session)
        response = super().post(request, *args, **kwargs)
        if from_cas and cas.cas_login_enabled():
            return HttpResponseRedirect(cas.logout_url(request=request, back_to=reverse("login")))
        return response


class LoginPage(auth_views.LoginView):
    """`/login/`: Django's login view with the throttled form. A refused attempt answers 429 with
    `Retry-After`, the page showing why in Chinese (form.throttled). With OIDC configured, the
    campus login button comes first; the password form stays for staff and the demo."""

    template_name = "registration/login.html"
    redirect_authenticated_user = True
    authentication_form = LoginForm

    def get_context_data(self, **kwargs):
        return _login_context(self.request, **super().get_context_data(**kwargs))

    def form_valid(self, form):
        return language_cookie_restore(super().form_valid(form), form.get_user())

    def form_invalid(self, form):
        response = super().form_invalid(form)
        if form.throttled is not None:
            response.status_code = 429
            response["Retry-After"] = str(form.throttled.retry_after)
        return response


def _language_cookie(response, language: str):
    response.set_cookie(settings.LANGUAGE_COOKIE_NAME, language, max_age=settings.LANGUAGE_COOKIE_AGE,
                        samesite=settings.LANGUAGE_COOKIE_SAMESITE, secure=settings.SESSION_COOKIE_SECURE)
    return response


def language_cookie_restore(response, user):
    """At login: the language the student chose before (on any device) becomes this browser's."""
    preference = Preference.objects.filter(user=user).first()
    return _language_cookie(response, preference.language) if preference is not None else response


@require_POST
def language_set(request):
    """`POST /language/` (`language`: zh-hans or en; the page's switch, with its CSRF token): the
    browser's language cookie, and the signed-in student's choice kept for their next login.
    Back to `next` (a path of this site), else 204 for a script."""
    language = request.POST.get("language", "")
    if language not in dict(settings.LANGUAGES):
        return HttpResponseBadRequest("unknown language")
    if request.user.is_authenticated:
        Preference.objects.update_or_create(user=request.user, defaults={"language": language})
    wanted = request.POST.get("next", "")
    safe = url_has_allowed_host_and_scheme(wanted, allowed_hosts={request.get_host()},
                                           require_https=request.is_secure())
    response = HttpResponseRedirect(wanted) if wanted and safe else HttpResponse(status=204)
    return _language_cookie(response, language)
