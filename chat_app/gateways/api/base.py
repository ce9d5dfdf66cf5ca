"""The REST views' common ground: JWT-or-session auth and the API's JSON error bodies (docs/design.md#the-chat-stream)."""
from django.core.exceptions import RequestDataTooBig
from django.http import Http404
from django.utils.translation import gettext_lazy as _
from rest_framework import exceptions, permissions
from rest_framework.response import Response
from rest_framework.views import APIView, set_rollback

from campus_agent.base import errors
from campus_agent.base.errors import GENERAL, INVALID_BODY, TOKEN_INVALID, ApplicationError
from chat_app.accounts.authentication import JwtAuthentication, SessionAuthentication
from chat_app.models import ApiKey


def _first_message(detail) -> str:
    if isinstance(detail, dict):
        for field, value in detail.items():
            text = _first_message(value)
            return text if field == "non_field_errors" else f"{field}: {text}"
    if isinstance(detail, list) and detail:
        return _first_message(detail[0])
    return str(detail)


def api_exception_handler(exc, context):
    """Every REST error as `{"code", "message"}` (docs/design.md#the-chat-stream); the project's EXCEPTION_HANDLER."""
    headers = {}
    if isinstance(exc, ApplicationError):  # ApiError, and the body parser's JsonBodyRefused
        status, code, message = exc.status, exc.code, exc.message
        headers = getattr(exc, "headers", {})
    elif isinstance(exc, RequestDataTooBig):  # raised by Django when DRF reads request.body
        status, code, message = 413, errors.BODY_TOO_LARGE, errors.MSG_BODY_TOO_LARGE
    elif isinstance(exc, exceptions.UnsupportedMediaType):
        status, code, message = 415, errors.UNSUPPORTED_MEDIA_TYPE, errors.MSG_CONTENT_TYPE
    elif isinstance(exc, Http404 | exceptions.NotFound):
        status, code, message = 404, errors.NOT_FOUND, errors.MSG_NOT_FOUND
    elif isinstance(exc, exceptions.NotAuthenticated):
        status, code, message = 401, TOKEN_INVALID, errors.TOKEN_MISSING_MESSAGE
    elif isinstance(exc, exceptions.AuthenticationFailed):
        status, code, message = 401, TOKEN_INVALID, errors.TOKEN_INVALID_MESSAGE
    elif isinstance(exc, exceptions.PermissionDenied):
        status, code, message = 403, errors.CSRF_FAILED, errors.MSG_CSRF
    elif isinstance(exc, exceptions.ValidationError | exceptions.ParseError):
        status, code, message = 400, INVALID_BODY, _first_message(exc.detail)
    elif isinstance(exc, exceptions.MethodNotAllowed):
        status, code, message = 405, errors.METHOD_NOT_ALLOWED, errors.MSG_METHOD
    elif isinstance(exc, exceptions.APIException):
        status, code, message = exc.status_code, GENERAL, str(exc.detail)
    else:
        return None  # a bug: let Django answer 500 and log it
    if status == 401:
        headers = {"WWW-Authenticate": "Bearer", **headers}
    set_rollback()
    return Response({"code": code, "message": message}, status=status, headers=headers)


class ApiView(APIView):
    authentication_classes = [JwtAuthentication, SessionAuthentication]
    permission_classes = [permissions.IsAuthenticated]

    def get_exception_handler(self):
        return api_exception_handler


MSG_LOGIN_NEEDED = _("这项操作需要登录（页面或 JWT），不能用 API 密钥。")


class LoggedIn(permissions.BasePermission):
    """Authenticated by a login, not by an API key."""

    message = MSG_LOGIN_NEEDED

    def has_permission(self, request, view) -> bool:
        return bool(request.user and request.user.is_authenticated) and not isinstance(request.auth, ApiKey)


class LoginOnlyView(ApiView):
    """A view a personal API key may not use (it answers 403 with a clear word)."""

    permission_classes = [LoggedIn]

    def permission_denied(self, request, message=None, code=None):
        if request.user and request.user.is_authenticated:  # a key: refused with a clear word
            raise errors.ApiError(MSG_LOGIN_NEEDED, code=errors.CSRF_FAILED, status=403)
        super().permission_denied(request, message, code)
