"""`/api/v1/auth/…`: password login, campus SSO login, logout (docs/design.md#cross-cutting-rules)."""
from django.contrib.auth import authenticate
from django.db import transaction
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import permissions
from rest_framework.response import Response

from audit_app.chain import Event, Outcome, audit_record
from campus_agent.base import errors
from campus_agent.base.errors import DOWNSTREAM
from chat_app.accounts import sessions as auth_services
from chat_app.accounts import throttle as login_throttle
from chat_app.accounts.authentication import JwtAuthentication
from chat_app.gateways.api.base import ApiView
from chat_app.gateways.api.serializers import (
    ErrorSerializer,
    SsoRequestSerializer,
    TokenRequestSerializer,
    TokenResponseSerializer,
)
from chat_app.models import AuthSession

THROTTLED_RESPONSE = OpenApiResponse(
    ErrorSerializer, description="登录失败次数过多（42903）：按 `Retry-After` 头的秒数等待后再试"
)


def _token_body(issued: auth_services.IssuedToken) -> dict:
    return {
        "access_token": issued.access_token,
        "token_type": "Bearer",
        "expires_in": issued.expires_in,
        "expires_at": issued.expires_at.isoformat(),
    }


def _sign_in_refused(request, *, via: str, reason: str, username: str = "") -> None:
    audit_record(event=Event.SIGN_IN, outcome=Outcome.REFUSED, request=request, actor_username=username,
                 target=via, details={"via": via, "reason": reason})


def _signed_in(request, *, user, via: str, roles: list[str], campus_token: str = "") -> auth_services.IssuedToken:
    """The JWT's session and its audit row, in one transaction."""
    via = str(via)
    with transaction.atomic():
        issued = auth_services.auth_session_create(user=user, via=via, roles=roles, campus_token=campus_token)
        audit_record(event=Event.SIGN_IN, request=request, actor=user, target=f"{via}_api",
                     details={"via": f"{via}_api"})
    return issued


def _attempt_admit(request, *, via: str, username: str | None = None) -> login_throttle.LoginAttempt:
    """Raises the 429 of a client or username past its failed-login limit (docs/api.md)."""
    try:
        return login_throttle.login_attempt_admit(ip=login_throttle.client_ip(request), username=username)
    except login_throttle.LoginThrottled as refused:
        if refused.first:  # one row per address and window, however hard a bot keeps trying
            _sign_in_refused(request, via=f"{str(via)}_api", reason="throttled", username=username or "")
        raise errors.ApiError(
            refused.message, code=errors.LOGIN_THROTTLED, status=429, headers={"Retry-After": str(refused.retry_after)}
        ) from None


class _TokenIssuingView(ApiView):
    """Reached without a token: these views are where a client gets one. Failed attempts are
    throttled per client address and per username (services/login_throttle.py)."""

    authentication_classes = []
    permission_classes = [permissions.AllowAny]


class TokenView(_TokenIssuingView):
    @extend_schema(
        tags=["auth"],
        summary="用户名 + 密码换 JWT",
        request=TokenRequestSerializer,
        responses={200: TokenResponseSerializer, 400: ErrorSerializer, 401: ErrorSerializer, 429: THROTTLED_RESPONSE},
    )
    def post(self, request):
        body = TokenRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        attempt = _attempt_admit(request, via=AuthSession.Via.PASSWORD, username=body.validated_data["username"])
        # A refusal is audited by authenticate()'s user_login_failed signal (audit_app.receivers).
        user = authenticate(request._request, **body.validated_data)
        if user is None:  # counted as a failure: the attempt stays in its counters
            raise errors.ApiError(errors.MSG_BAD_CREDENTIALS, code=errors.INVALID_CREDENTIALS, status=401)
        login_throttle.login_attempt_succeeded(attempt=attempt)
        issued = _signed_in(request, user=user, via=AuthSession.Via.PASSWORD, roles=auth_services.user_roles(user=user))
        return Response(_token_body(issued))


class SsoView(_TokenIssuingView):
    @extend_schema(
        tags=["auth"],
        summary="校园令牌换 JWT",
        description="用 `GET CAMPUS_SSO_USERINFO_URL`（Bearer 校园令牌）核验；用户按 sub 创建或更新。"
        "校园令牌保存在服务端会话中，只发给子 Agent。",
        request=SsoRequestSerializer,
        responses={
            200: TokenResponseSerializer,
            401: OpenApiResponse(ErrorSerializer, description="校园令牌无效（token_invalid）"),
            429: THROTTLED_RESPONSE,
            502: OpenApiResponse(ErrorSerializer, description="统一认证不可用"),
            503: OpenApiResponse(ErrorSerializer, description="未配置 CAMPUS_SSO_USERINFO_URL"),
        },
    )
    def post(self, request):
        body = SsoRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        campus_token = body.validated_data["campus_token"].strip()
        attempt = _attempt_admit(request, via=AuthSession.Via.SSO)  # a campus token names no user: per address only
        try:
            profile = auth_services.campus_profile_fetch(campus_token=campus_token)
        except auth_services.SsoNotConfigured:
            login_throttle.login_attempt_void(attempt=attempt)
            raise errors.ApiError(errors.MSG_SSO_NOT_CONFIGURED, code=DOWNSTREAM, status=503) from None
        except auth_services.SsoRejected:  # a failure: the attempt stays counted
            _sign_in_refused(request, via="sso_api", reason="campus_token")
            raise errors.token_invalid() from None
        except auth_services.SsoUnavailable:
            login_throttle.login_attempt_void(attempt=attempt)
            raise errors.ApiError(errors.MSG_SSO_UNAVAILABLE, code=DOWNSTREAM, status=502) from None
        login_throttle.login_attempt_succeeded(attempt=attempt)
        user = auth_services.sso_user_upsert(profile=profile)
        if not user.is_active:
            _sign_in_refused(request, via="sso_api", reason="inactive", username=user.get_username())
            raise errors.token_invalid()
        issued = _signed_in(request, user=user, via=AuthSession.Via.SSO, roles=profile["roles"],
                            campus_token=campus_token)
        return Response(_token_body(issued))


MSG_LOGOUT_KEY = _("注销只适用于 JWT；API 密钥请在「API 密钥」中吊销。")


class LogoutView(ApiView):
    authentication_classes = [JwtAuthentication]

    @extend_schema(
        tags=["auth"], summary="注销 JWT（删除其服务端会话）", request=None, responses={204: None, 401: ErrorSerializer}
    )
    def post(self, request):
        if not isinstance(request.auth, AuthSession):  # an API key: revoked on its own, not logged out
            raise errors.invalid_body(MSG_LOGOUT_KEY)
        with transaction.atomic():
            auth_services.auth_session_revoke(session=request.auth)
            audit_record(event=Event.SIGN_OUT, request=request, actor=request.user, target="api")
        return Response(status=204)
