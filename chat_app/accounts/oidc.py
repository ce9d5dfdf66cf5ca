"""Campus login with OpenID Connect for the page (issue 13): authorization code + PKCE.

Authlib does the protocol (the authorization URL with its S256 code challenge, the token
exchange with the client's credentials, refresh, RFC 7009 revocation) over httpx, which the
project already uses; joserfc (Authlib's JOSE library) checks the ID token against the
provider's published keys. This module keeps what is ours: the flow's secrets in the Django
session, linking the campus `sub` to a local user (CampusIdentity, exactly as
`/api/v1/auth/sso` does), and the campus token of a page login.

The campus token (the provider's access token) is a credential (docs/design.md#cross-cutting-rules): it is kept in the
server-side Django session (the cookie holds only the session key), never in a page, a frame or
a log, and it goes to sub-agents only. A chat turn asks `session_campus_token`, which refreshes
it with the refresh token when it is about to expire; logout revokes both at the provider.
"""
import hmac
import secrets
import time
import unicodedata
from dataclasses import dataclass

import httpx
from authlib.common.errors import AuthlibBaseError
from authlib.integrations.httpx_client import OAuth2Client
from django.conf import settings
from django.core.cache import cache
from django.utils.translation import gettext_lazy as _
from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet
from loguru import logger

from campus_agent.base.redaction import mask_token
from chat_app.accounts.campus_groups import campus_attributes_kept

FLOW_KEY = "campus_oidc_flow"  # state, nonce, PKCE verifier and where to go back, during a login
TOKENS_KEY = "campus_oidc_tokens"  # the logged-in page's campus tokens
DISCOVERY_TTL_SEC = 3600
REFRESH_MARGIN_SEC = 30  # refresh a token this close to expiry: a sub-agent call takes time too
ID_TOKEN_LEEWAY_SEC = 60
ID_TOKEN_ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "ES256", "ES384"]
COOKIE_SESSION_ENGINE = "django.contrib.sessions.backends.signed_cookies"


CAMPUS_SUB_MAX = 150  # Django's username length: a new user is named after the sub
MSG_SUB_UNUSABLE = _("校园账号的用户标识（sub）无法使用：含控制字符或超过 150 个字符。请联系校园统一身份认证的管理员。")


class CampusLoginFailed(Exception):
    """The provider could not be reached, refused the code, or sent something unusable;
    `message`, when set, is what the login page tells the student instead of the general text."""

    def __init__(self, message: str | None = None):
        super().__init__(message or "")
        self.message = message


def campus_sub_usable(sub) -> str | None:
    """The campus `sub`, trimmed, when it can name a user: 1–150 characters with no control or
    format character (a newline, NUL, a bidi override …: it becomes a username shown in admin and
    logs); else None. /api/v1/auth/sso's profile answers are checked with it too."""
    if not isinstance(sub, str):
        return None
    sub = sub.strip()
    if not sub or len(sub) > CAMPUS_SUB_MAX:
        return None
    if any(unicodedata.category(char) in ("Cc", "Cf", "Cs", "Zl", "Zp") for char in sub):
        return None
    return sub


def campus_login_enabled() -> bool:
    """OIDC_ISSUER and OIDC_CLIENT_ID set, and a server-side session store to keep tokens in."""
    if not (settings.OIDC_ISSUER and settings.OIDC_CLIENT_ID):
        return False
    # Cookie sessions would hand the campus token to the browser.
    return settings.SESSION_ENGINE != COOKIE_SESSION_ENGINE


def _http_get_json(url: str, **kwargs) -> dict:
    try:
        response = httpx.get(url, timeout=settings.OIDC_TIMEOUT, **kwargs)
        response.raise_for_status()
        body = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        logger.warning("campus OIDC: GET {} failed: {}", url, type(exc).__name__)
        raise CampusLoginFailed() from None
    if not isinstance(body, dict):
        raise CampusLoginFailed()
    return body


def provider_metadata() -> dict:
    """The provider's discovery document (cached for an hour), checked to name our issuer."""
    issuer = settings.OIDC_ISSUER.rstrip("/")
    key = f"campus-oidc:discovery:{issuer}"
    metadata = cache.get(key)
    if metadata is None:
        metadata = _http_get_json(f"{issuer}/.well-known/openid-configuration")
        if str(metadata.get("issuer", "")).rstrip("/") != issuer:
            logger.warning("campus OIDC: discovery names another issuer")
            raise CampusLoginFailed()
        for field in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
            if not isinstance(metadata.get(field), str):
                raise CampusLoginFailed()
        cache.set(key, metadata, DISCOVERY_TTL_SEC)
    return metadata


def _key_set(metadata: dict, *, fresh: bool = False) -> KeySet:
    key = f"campus-oidc:jwks:{metadata['jwks_uri']}"
    jwks = None if fresh else cache.get(key)
    if jwks is None:
        jwks = _http_get_json(metadata["jwks_uri"])
        cache.set(key, jwks, DISCOVERY_TTL_SEC)
    try:
        return KeySet.import_key_set(jwks)
    except (JoseError, ValueError, TypeError, KeyError):
        raise CampusLoginFailed() from None


def _client(*, redirect_uri: str | None = None) -> OAuth2Client:
    return OAuth2Client(
        client_id=settings.OIDC_CLIENT_ID,
        client_secret=settings.OIDC_CLIENT_SECRET or None,
        token_endpoint_auth_method=settings.OIDC_TOKEN_AUTH_METHOD,
        scope=settings.OIDC_SCOPES,
        redirect_uri=redirect_uri,
        code_challenge_method="S256",
        timeout=settings.OIDC_TIMEOUT,
    )


# --- the login flow --------------------------------------------------------------------------


def login_begin(*, session, redirect_uri: str, next_url: str) -> str:
    """The provider's authorization URL; the flow's secrets are kept in `session` for the callback."""
    metadata = provider_metadata()
    flow = {
        "state": secrets.token_urlsafe(32),
        "nonce": secrets.token_urlsafe(32),
        "verifier": secrets.token_urlsafe(64),  # 86 characters: within RFC 7636's 43–128
        "redirect_uri": redirect_uri,
        "next": next_url,
    }
    with _client(redirect_uri=redirect_uri) as client:
        url, _ = client.create_authorization_url(
            metadata["authorization_endpoint"], state=flow["state"], code_verifier=flow["verifier"], nonce=flow["nonce"]
        )
    session[FLOW_KEY] = flow
    return url


@dataclass(frozen=True)
class CampusLogin:
    profile: dict  # {"sub", "name", "roles"}, as campus_profile_fetch returns for /auth/sso
    tokens: dict  # what TOKENS_KEY holds
    next_url: str


def login_finish(*, session, state: str, code: str) -> CampusLogin:
    """Checks `state` against the flow in `session`, exchanges `code` (with the PKCE verifier),
    validates the ID token (signature, iss, aud, exp, nonce) and reads the profile. Raises
    CampusLoginFailed. The flow is used once: it leaves the session whatever happens."""
    flow = session.pop(FLOW_KEY, None)
    if not flow or not state or not hmac.compare_digest(str(flow.get("state", "")), state):
        raise CampusLoginFailed()
    metadata = provider_metadata()
    try:
        with _client(redirect_uri=flow["redirect_uri"]) as client:
            token = client.fetch_token(
                metadata["token_endpoint"],
                grant_type="authorization_code",
                code=code,
                redirect_uri=flow["redirect_uri"],
                code_verifier=flow["verifier"],
            )
    except (AuthlibBaseError, httpx.HTTPError, ValueError) as exc:
        logger.warning("campus OIDC: code exchange failed: {}", type(exc).__name__)
        raise CampusLoginFailed() from None
    access_token = token.get("access_token")
    if not isinstance(access_token, str) or not access_token.isascii() or not access_token.isprintable():
        raise CampusLoginFailed()  # it is sent on in an Authorization header
    claims = _id_token_claims(metadata, token.get("id_token"), nonce=flow["nonce"])
    profile = _profile(metadata, claims, access_token)
    logger.info("campus OIDC login sub accepted token={}", mask_token(access_token))
    return CampusLogin(profile=profile, tokens=_tokens_kept(token), next_url=flow.get("next") or "/")


def _id_token_claims(metadata: dict, id_token, *, nonce: str) -> dict:
    if not isinstance(id_token, str):
        raise CampusLoginFailed()
    registry = jwt.JWTClaimsRegistry(
        leeway=ID_TOKEN_LEEWAY_SEC,
        iss={"essential": True, "value": metadata["issuer"]},
        aud={"essential": True, "value": settings.OIDC_CLIENT_ID},
        sub={"essential": True},
        exp={"essential": True},
        iat={"essential": True},
        nonce={"essential": True, "value": nonce},
    )
    for fresh in (False, True):  # a key the cache does not know yet: the provider rotated keys
        try:
            decoded = jwt.decode(id_token, _key_set(metadata, fresh=fresh), algorithms=ID_TOKEN_ALGORITHMS)
            registry.validate(decoded.claims)
            _authorized_party_check(decoded.claims)
            return decoded.claims
        except JoseError as exc:
            if fresh:
                logger.warning("campus OIDC: ID token refused: {}", type(exc).__name__)
        except (ValueError, TypeError):
            break
    raise CampusLoginFailed()


def _authorized_party_check(claims: dict) -> None:
    """OIDC Core 3.1.3.7 (4, 5): a token for several audiences must name us as its authorized
    party (`azp`), and an `azp` present must be our client id — else the token was issued to
    another client that merely listed us (joserfc's `aud` check accepts any list holding us)."""
    aud, azp = claims.get("aud"), claims.get("azp")
    several = isinstance(aud, list) and len(aud) > 1
    if (several or azp is not None) and azp != settings.OIDC_CLIENT_ID:
        logger.warning("campus OIDC: ID token refused: azp {} for audiences {}",
                       "missing" if azp is None else "of another client", len(aud) if isinstance(aud, list) else 1)
        raise CampusLoginFailed()


def _profile(metadata: dict, claims: dict, access_token: str) -> dict:
    """sub from the ID token; name and roles from the user-info endpoint when there is one (the
    same answer `/api/v1/auth/sso` reads), else from the ID token."""
    sub = campus_sub_usable(claims.get("sub"))
    if sub is None:
        logger.warning("campus OIDC: ID token refused: unusable sub")
        raise CampusLoginFailed(MSG_SUB_UNUSABLE)
    info = dict(claims)
    if isinstance(metadata.get("userinfo_endpoint"), str):
        info.update(_http_get_json(metadata["userinfo_endpoint"], headers={"Authorization": f"Bearer {access_token}"}))
        if info.get("sub") != sub:  # OIDC Core 5.3.2: a user-info answer about someone else is void
            raise CampusLoginFailed()
    roles = info.get("roles")
    name = info.get("name") or info.get("preferred_username") or ""
    return {
        "sub": sub,
        "name": str(name)[:150],
        "roles": [str(role) for role in roles] if isinstance(roles, list) else [],
        "attributes": campus_attributes_kept(info),  # what group mappings of source oidc read
    }


def _tokens_kept(token: dict, *, previous: dict | None = None) -> dict:
    expires_in = token.get("expires_in")
    expires_at = time.time() + expires_in if isinstance(expires_in, int | float) and expires_in > 0 else None
    kept = {
        "access_token": token["access_token"],
        # A provider that does not rotate refresh tokens answers a refresh without one.
        "refresh_token": token.get("refresh_token") or (previous or {}).get("refresh_token") or "",
        "expires_at": expires_at,
    }
    return kept


def tokens_store(*, session, tokens: dict) -> None:
    session[TOKENS_KEY] = tokens


# --- during the login: the chat's campus token ------------------------------------------------


def session_campus_token(*, session) -> str | None:
    """The campus token of a page login, refreshed first when it expires within
    REFRESH_MARGIN_SEC and there is a refresh token. A refresh that fails leaves the old token:
    the sub-agent then says 40102 and the page offers to log in again."""
    tokens = session.get(TOKENS_KEY)
    if not isinstance(tokens, dict) or not tokens.get("access_token"):
        return None
    expires_at = tokens.get("expires_at")
    if tokens.get("refresh_token") and expires_at is not None and expires_at - REFRESH_MARGIN_SEC <= time.time():
        refreshed = _refresh(tokens)
        if refreshed is not None:
            session[TOKENS_KEY] = tokens = refreshed
    return tokens["access_token"]


def _refresh(tokens: dict) -> dict | None:
    try:
        metadata = provider_metadata()
        with _client() as client:
            token = client.refresh_token(metadata["token_endpoint"], refresh_token=tokens["refresh_token"])
    except (CampusLoginFailed, AuthlibBaseError, httpx.HTTPError, ValueError) as exc:
        logger.info("campus OIDC: refresh failed: {}", type(exc).__name__)
        return None
    if not isinstance(token.get("access_token"), str):
        return None
    logger.info("campus OIDC token refreshed token={}", mask_token(token["access_token"]))
    return _tokens_kept(token, previous=tokens)


def session_tokens_revoke(*, session) -> None:
    """Revokes the page login's refresh and access tokens at the provider (RFC 7009), when it
    offers revocation; the session itself is flushed by Django's logout."""
    tokens = session.pop(TOKENS_KEY, None)
    if not isinstance(tokens, dict) or not campus_login_enabled():
        return
    try:
        url = provider_metadata().get("revocation_endpoint")
    except CampusLoginFailed:
        return
    if not isinstance(url, str):
        return
    with _client() as client:
        for hint in ("refresh_token", "access_token"):
            if not tokens.get(hint):
                continue
            try:
                client.revoke_token(url, token=tokens[hint], token_type_hint=hint)
            except (AuthlibBaseError, httpx.HTTPError) as exc:
                logger.warning("campus OIDC: revoking the {} failed: {}", hint, type(exc).__name__)
