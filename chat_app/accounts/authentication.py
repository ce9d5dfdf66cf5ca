"""Who is calling: a Bearer JWT naming a live AuthSession row, a personal API key (`cak_…`,
chat_app.accounts.api_keys), or the page's Django session.

With an `Authorization` header the token alone decides (a bad JWT is 401 even when a session
cookie is also sent). Without one, the Django session is used and its POSTs must carry the
CSRF token: a cookie is sent by the browser on its own, a header is not, so only the session
path needs CSRF protection.
"""
from dataclasses import dataclass
from importlib import import_module

from django.conf import settings
from django.contrib.auth import get_user
from django.core.exceptions import BadRequest, RequestDataTooBig, SuspiciousOperation
from django.http.multipartparser import MultiPartParserError
from django.middleware.csrf import CsrfViewMiddleware
from rest_framework import authentication, exceptions

from campus_agent.base import errors
from campus_agent.base.asyncdb import db_call
from campus_agent.base.json_body import too_large, unsupported_media_type
from chat_app.accounts.api_keys import api_key_campus_token, api_key_resolve, looks_like_api_key
from chat_app.accounts.oidc import session_campus_token
from chat_app.accounts.session_cache import auth_session_cached, auth_session_remember
from chat_app.accounts.sessions import auth_session_get_valid
from chat_app.accounts.tokens import TokenInvalid, jwt_decode
from chat_app.models import ApiKey, AuthSession


@dataclass(frozen=True)
class Caller:
    user: object
    auth_session: AuthSession | None  # None for the page's Django session
    # Without an AuthSession: a page login made with the campus account (chat_app/accounts/oidc.py) keeps
    # its campus token in the server-side Django session (None for a password login); an API key
    # carries none, and lends the user's latest live login's (api_key_campus_token).
    page_campus_token: str | None = None
    api_key: ApiKey | None = None

    @property
    def campus_token(self) -> str | None:
        if self.auth_session is not None:
            return self.auth_session.campus_token or None
        return self.page_campus_token


def bearer_token(request) -> str | None:
    """The token of an `Authorization: Bearer …` header; "" for any other Authorization value;
    None without the header."""
    header = request.META.get("HTTP_AUTHORIZATION")
    if header is None:
        return None
    scheme, _, token = header.strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def _jwt_session_and_claims(token: str) -> tuple[AuthSession, dict]:
    if not token:
        raise TokenInvalid("empty")
    claims = jwt_decode(token=token)
    session = auth_session_get_valid(session_id=claims["sid"], user_id=int(claims["sub"]))
    if session is None:
        raise TokenInvalid("session")
    return session, claims


def jwt_session_resolve(*, token: str) -> AuthSession:
    """The AuthSession a valid JWT names (with its user). Raises TokenInvalid."""
    return _jwt_session_and_claims(token)[0]


# Where campus_agent/intake.py leaves the Bearer caller it resolved before reading the body (on
# the ASGI scope), so the view does not look the same token up again.
CALLER_SCOPE_KEY = "campus_agent.caller"


def chat_caller_cached(request) -> Caller | None:
    """The caller of a Bearer JWT checked against the database less than AUTH_SESSION_CACHE_SEC
    ago (chat_app.accounts.session_cache), or of a Bearer the intake checked for this very request,
    without I/O; None otherwise (then `chat_caller_resolve` decides)."""
    checked = getattr(request, "scope", {}).get(CALLER_SCOPE_KEY)
    if checked is not None:
        return checked
    token = bearer_token(request)
    session = auth_session_cached(token=token) if token else None
    return Caller(user=session.user, auth_session=session) if session is not None else None


def _session_user(request):
    user = get_user(request)
    return user if user.is_authenticated else None


def _csrf_failure(request) -> bool:
    # The view is csrf_exempt (JWT calls need no token); the check runs here for the session path.
    check = CsrfViewMiddleware(lambda req: None)
    check.process_request(request)
    try:
        return check.process_view(request, None, (), {}) is not None
    except RequestDataTooBig:
        raise _refusal(too_large()) from None
    except (MultiPartParserError, BadRequest, SuspiciousOperation):
        # Without an X-CSRFToken header Django looks for the token in a form body; one it cannot
        # read (a multipart body without its boundary, too many fields) was a 400 with Django's
        # empty HTML page. These endpoints take JSON only: say so, as for a JWT caller (415).
        raise _refusal(unsupported_media_type()) from None


def _refusal(exc) -> errors.ApiError:
    return errors.ApiError(exc.message, code=exc.code, status=exc.status)


def bearer_caller_resolve(*, token: str) -> Caller:
    """The caller of a Bearer token: a JWT or a personal API key. Sync. Raises ApiError 401
    token_invalid."""
    if looks_like_api_key(token):
        key = api_key_resolve(token=token)
        if key is None:
            raise errors.token_invalid()
        return Caller(user=key.user, auth_session=None, page_campus_token=api_key_campus_token(user=key.user),
                      api_key=key)
    try:
        session, claims = _jwt_session_and_claims(token)
    except TokenInvalid:
        raise errors.token_invalid() from None
    auth_session_remember(token=token, session=session, token_exp=claims["exp"])
    return Caller(user=session.user, auth_session=session)


def chat_caller_resolve(request) -> Caller:
    """Sync (runs in the stream view's one thread hop). Raises ApiError: 401 token_missing /
    token_invalid, 403 when a session POST lacks its CSRF token."""
    token = bearer_token(request)
    if token is not None:
        return bearer_caller_resolve(token=token)
    user = _session_user(request)
    if user is None:
        raise errors.token_missing()
    if _csrf_failure(request):
        raise errors.ApiError(errors.MSG_CSRF, code=errors.CSRF_FAILED, status=403)
    # Refreshed here when about to expire: the run sends it to sub-agents for the whole turn.
    return Caller(user=user, auth_session=None, page_campus_token=session_campus_token(session=request.session))


def _caller_known(request) -> Caller | None:
    token = bearer_token(request)
    if token is not None:
        return bearer_caller_resolve(token=token)
    engine = import_module(settings.SESSION_ENGINE)
    request.session = engine.SessionStore(request.COOKIES.get(settings.SESSION_COOKIE_NAME))
    if _session_user(request) is None:
        raise errors.token_missing()
    return None


async def acaller_known(request) -> Caller | None:
    """Checks, from the request's head alone, that it names a caller: campus_agent/intake.py asks
    before it reads a body (docs/security.md#request-bodies-refused-before-they-are-read). Returns
    a Bearer's caller, or None for the page's session with a user; raises ApiError 401
    (token_missing / token_invalid). The CSRF check needs the body: the view makes it."""
    cached = chat_caller_cached(request)
    return cached if cached is not None else await db_call(_caller_known, request)


async def achat_caller_resolve(request) -> Caller:
    """See chat_caller_resolve(); a Bearer JWT checked a moment ago (`chat_caller_cached`) without
    leaving the event loop, any other caller on a database thread."""
    cached = chat_caller_cached(request)
    return cached if cached is not None else await db_call(chat_caller_resolve, request)


class JwtAuthentication(authentication.BaseAuthentication):
    """DRF side of the same Bearer rule; `request.auth` is the AuthSession, or the ApiKey."""

    def authenticate(self, request):
        token = bearer_token(request._request)
        if token is None:
            return None
        if looks_like_api_key(token):
            key = api_key_resolve(token=token)
            if key is None:
                raise exceptions.AuthenticationFailed(errors.TOKEN_INVALID_MESSAGE)
            return key.user, key
        try:
            session = jwt_session_resolve(token=token)
        except TokenInvalid:
            raise exceptions.AuthenticationFailed(errors.TOKEN_INVALID_MESSAGE) from None
        return session.user, session

    def authenticate_header(self, request) -> str:
        return "Bearer"


class SessionAuthentication(authentication.SessionAuthentication):
    """DRF's session auth (CSRF enforced), tried only when no Authorization header was sent."""

    def authenticate(self, request):
        if bearer_token(request._request) is not None:
            return None
        return super().authenticate(request)
