"""MCP services that each student authorizes with their own account (OAuth 2.1, issue 23), and
services the gateway calls with a credential of its own (`"grant": "client_credentials"`).

A streamable-HTTP or SSE McpService whose config has `oauth` (`{}`: the gateway registers itself;
`{"client_id": …, "client_secret": …, "scope": …}`: a client staff pre-registered) is opened
per student: the pool keys its sessions by (service, student), and each session's HTTP client
authenticates with `CampusOAuthProvider`, the SDK's `OAuthClientProvider`. The SDK does the
protocol as the spec says: protected-resource metadata (RFC 9728) from the 401's
`WWW-Authenticate` or the well-known URLs, authorization-server metadata (RFC 8414, OIDC
discovery), a client ID metadata document when the server takes one (settings
MCP_OAUTH_CLIENT_METADATA_URL), else dynamic registration, else the pre-registered client; PKCE
S256, the `resource` parameter (RFC 8707), the issuer check of the answer (RFC 9207), scope
step-up on 403 `insufficient_scope`. What this module adds:

- Where it is kept: the student's tokens in McpOAuthGrant, the gateway's registration in
  McpOAuthClient (one per service), both encrypted (campus_agent.base.crypto), so a worker restart or
  another worker goes on with the same authorization.
- Who answers the authorization page: the person the calling task set (person.py). With nobody
  at hand the opening fails with McpAuthorizationRequired, which carries the URL the student
  must visit (the conformance client sets a headless person, testkit/mcp/conformance_client.py).
- Refresh before the access token expires (a random margin, so the sessions of one student do not
  all refresh at the same second), single-flight across workers: a lock in the cache (Redis when
  REDIS_URL is set, the process's memory otherwise), and whoever waited reads the tokens the
  winner stored instead of spending the same refresh token again — an authorization server that
  rotates refresh tokens revokes the whole family when one is used twice.
- Where the flow may go: every request it makes, and the page a student is sent to, stays on the
  service's own origin or one staff allowed, and off internal addresses (oauth_origins.py).
"""
from __future__ import annotations

import asyncio
import datetime as dt
import logging
import random
import secrets
import time
import uuid
from collections.abc import AsyncGenerator
from urllib.parse import urlencode, urljoin

import httpx
import httpx2
from django.conf import settings
from django.core.cache import cache
from django.utils import timezone
from loguru import logger
from mcp.client.auth import OAuthClientProvider
from mcp.client.auth.exceptions import OAuthFlowError, OAuthTokenError
from mcp.client.auth.extensions.client_credentials import (
    ClientCredentialsOAuthProvider,
    PrivateKeyJWTOAuthProvider,
    SignedJWTParameters,
)
from mcp.client.auth.oauth2 import PKCEParameters
from mcp.client.auth.utils import validate_authorization_response_iss
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthMetadata,
    OAuthToken,
    ProtectedResourceMetadata,
)
from pydantic import AnyUrl, ValidationError

from agents_app.mcp.oauth_origins import McpOAuthRefused, OriginGuard, aoauth_url_check, oauth_url_check
from agents_app.mcp.person import person_authorizing
from agents_app.models import McpOAuthClient, McpOAuthGrant, McpOAuthPending, McpService
from campus_agent.base.asyncdb import db_call
from campus_agent.base.crypto import secret_decrypt, secret_encrypt
from campus_agent.base.version import PRODUCT_TITLE

# Refresh this long before the access token's expiry, plus up to the jitter: a token is never
# sent in its last seconds (clock skew, a slow request), and sessions spread their refreshes.
REFRESH_MARGIN_SEC = 30.0
REFRESH_JITTER_SEC = 30.0
# How long a worker may hold the refresh lock of one student's service; a worker that dies
# holding it frees it after this. Waiters poll at REFRESH_LOCK_POLL_SEC.
REFRESH_LOCK_SEC = 30
REFRESH_LOCK_POLL_SEC = 0.05
HTTP_PROTOCOLS = (McpService.Protocol.SSE, McpService.Protocol.STREAMABLE_HTTP)


PER_STUDENT = "authorization_code"
GATEWAY_CREDENTIAL = "client_credentials"


def oauth_config(service: McpService) -> dict | None:
    """The service's `config.oauth` (an HTTP service's only), or None."""
    oauth = (service.config or {}).get("oauth") if service.protocol in HTTP_PROTOCOLS else None
    return oauth if isinstance(oauth, dict) else None


def oauth_required(service: McpService) -> bool:
    """Whether each student authorizes the service with their own account."""
    oauth = oauth_config(service)
    return oauth is not None and oauth.get("grant", PER_STUDENT) == PER_STUDENT


class McpAuthorizationRequired(Exception):
    """The service needs the student's authorization and nobody here can give it: the student
    visits `authorization_url` (the authorization server's page)."""

    def __init__(self, authorization_url: str):
        super().__init__("需要学生授权")
        self.authorization_url = authorization_url


async def _redirect(authorization_url: str) -> None:
    person = person_authorizing()
    if person is None:  # nobody to send to the page: the opening ends with its URL
        raise McpAuthorizationRequired(authorization_url)
    await person.authorization_redirect(authorization_url)


async def _callback() -> AuthorizationCodeResult:
    person = person_authorizing()
    if person is None:  # never reached: _redirect raised
        raise McpAuthorizationRequired("")
    return await person.authorization_callback()


def _decrypted(model_cls, text: str):
    plain = secret_decrypt(text)
    if plain is None:  # the key changed (SECRET_KEY rotated): as if never stored
        return None
    try:
        return model_cls.model_validate_json(plain)
    except ValidationError:
        return None


class GrantStore:
    """The SDK's TokenStorage over the database: the student's tokens, the service's client."""

    def __init__(self, service: McpService, user_id: int):
        self.service = service
        self.user_id = user_id
        # The provider's flow context (what discovery found): its revocation endpoint is stored
        # with the tokens, so a disconnect can revoke them (grant_revoke).
        self.context_of = lambda: None

    def _grant_read(self) -> McpOAuthGrant | None:
        return McpOAuthGrant.objects.filter(user_id=self.user_id, service_id=self.service.pk).first()

    async def grant(self) -> tuple[OAuthToken | None, dt.datetime | None]:
        """The stored tokens and when their access token expires."""
        row = await db_call(self._grant_read)
        if row is None:
            return None, None
        return _decrypted(OAuthToken, row.tokens_encrypted), row.expires_at

    async def get_tokens(self) -> OAuthToken | None:
        return (await self.grant())[0]

    async def set_tokens(self, tokens: OAuthToken) -> None:
        expires_at = timezone.now() + dt.timedelta(seconds=tokens.expires_in) if tokens.expires_in else None

        context = self.context_of()
        metadata = getattr(context, "oauth_metadata", None)
        revocation = str(metadata.revocation_endpoint) if metadata is not None and metadata.revocation_endpoint else ""

        def write() -> None:
            defaults = {"tokens_encrypted": secret_encrypt(tokens.model_dump_json()), "scope": tokens.scope or "",
                        "expires_at": expires_at}
            if revocation:  # a refresh runs without discovery: the endpoint found before stays
                defaults["revocation_endpoint"] = revocation[:2000]
            McpOAuthGrant.objects.update_or_create(user_id=self.user_id, service_id=self.service.pk, defaults=defaults)

        await db_call(write)
        logger.info("MCP OAuth tokens stored service={} user={} scope={!r} expires_at={}", self.service.name,
                    self.user_id, tokens.scope, expires_at)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return await db_call(_client_info_sync, self.service)

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        await db_call(lambda: McpOAuthClient.objects.update_or_create(
            service_id=self.service.pk, defaults={"client_info_encrypted": secret_encrypt(client_info.model_dump_json())}
        ))
        logger.info("MCP OAuth client registered service={} client_id={}", self.service.name, client_info.client_id)


REVOKE_TIMEOUT_SEC = 5.0


def grant_revoke(grant: McpOAuthGrant) -> bool:
    """Revokes a student's tokens at the authorization server (RFC 7009: the refresh token, then
    the access token), as the gateway's client; best effort, for a disconnect: False when the
    server has no revocation endpoint, one the tokens may not be sent to (oauth_origins.py), or
    did not take it. Sync, at most REVOKE_TIMEOUT_SEC per token."""
    if not grant.revocation_endpoint:
        return False
    try:
        oauth_url_check(grant.service, grant.revocation_endpoint)
    except McpOAuthRefused:
        return False
    tokens = _decrypted(OAuthToken, grant.tokens_encrypted)
    client = _client_info_sync(grant.service)
    if tokens is None or client is None:
        return False
    auth, form = None, {}
    if client.client_secret and client.token_endpoint_auth_method != "client_secret_post":
        auth = (client.client_id, client.client_secret)
    else:
        form["client_id"] = client.client_id
        if client.client_secret:
            form["client_secret"] = client.client_secret
    taken = True
    with httpx.Client(timeout=REVOKE_TIMEOUT_SEC, follow_redirects=False) as http:
        for token, hint in ((tokens.refresh_token, "refresh_token"), (tokens.access_token, "access_token")):
            if not token:
                continue
            try:
                answer = http.post(grant.revocation_endpoint, auth=auth,
                                   data={**form, "token": token, "token_type_hint": hint})
                taken = taken and answer.status_code == 200
            except httpx.HTTPError as exc:
                logger.warning("MCP OAuth revocation failed service={} user={}: {}", grant.service.name,
                               grant.user_id, type(exc).__name__)
                taken = False
    logger.info("MCP OAuth tokens revoked service={} user={} taken={}", grant.service.name, grant.user_id, taken)
    return taken


def _client_info_sync(service: McpService) -> OAuthClientInformationFull | None:
    """Who the gateway is at the service's authorization server: the client staff registered
    (the config's `client_id`), else the one it registered itself (McpOAuthClient)."""
    oauth = (service.config or {}).get("oauth") or {}
    if oauth.get("client_id"):
        secret = oauth.get("client_secret") or None
        return OAuthClientInformationFull(client_id=oauth["client_id"], client_secret=secret,
                                          redirect_uris=[AnyUrl(redirect_url())],
                                          token_endpoint_auth_method="client_secret_basic" if secret else "none")
    row = McpOAuthClient.objects.filter(service_id=service.pk).first()
    return _decrypted(OAuthClientInformationFull, row.client_info_encrypted) if row is not None else None


def redirect_url() -> str:
    """Where the authorization server sends the student back (settings.MCP_OAUTH_REDIRECT_URL)."""
    return settings.MCP_OAUTH_REDIRECT_URL


def client_metadata_document() -> dict | None:
    """The gateway's client ID metadata document, served at MCP_OAUTH_CLIENT_METADATA_URL (None
    when that is not set): an authorization server that takes such documents fetches it to learn
    who the client is, with no registration. A public client: the code is bound by PKCE."""
    url = settings.MCP_OAUTH_CLIENT_METADATA_URL
    if not url:
        return None
    return {"client_id": url, "client_name": PRODUCT_TITLE, "redirect_uris": [redirect_url()],
            "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"],
            "token_endpoint_auth_method": "none"}


def client_metadata(service: McpService) -> OAuthClientMetadata:
    """What the gateway registers as (dynamic registration) and asks for (scope: the config's,
    else what the server's 401 or metadata names)."""
    scope = ((service.config or {}).get("oauth") or {}).get("scope") or None
    return OAuthClientMetadata(
        client_name=PRODUCT_TITLE, redirect_uris=[AnyUrl(redirect_url())], grant_types=["authorization_code", "refresh_token"],
        response_types=["code"], scope=scope,
    )


class CampusOAuthProvider(OriginGuard, OAuthClientProvider):
    """The SDK's provider, with the stored expiry honoured, refresh single-flight and its requests
    kept where they may go (docstring)."""

    def __init__(self, service: McpService, user_id: int):
        self.store = GrantStore(service, user_id)
        self._lock_key = f"mcp:oauth:refresh:{service.pk}:{user_id}"
        super().__init__(
            service=service, server_url=service.config["url"], client_metadata=client_metadata(service), storage=self.store,
            redirect_handler=_redirect, callback_handler=_callback,
            client_metadata_url=settings.MCP_OAUTH_CLIENT_METADATA_URL or None,
        )
        self.store.context_of = lambda: self.context

    def _expiry_set(self, expires_at: dt.datetime | None) -> None:
        # The SDK computes the expiry only from a token response it just got, and takes a stored
        # token for valid forever: a token loaded after a restart would be sent until a 401 sent
        # the student through the authorization page again, instead of being refreshed.
        if expires_at is None:
            self.context.token_expiry_time = None
            return
        margin = REFRESH_MARGIN_SEC + random.uniform(0, REFRESH_JITTER_SEC)
        self.context.token_expiry_time = expires_at.timestamp() - margin

    async def _initialize(self) -> None:  # the SDK's, plus the stored expiry
        tokens, expires_at = await self.store.grant()
        self.context.current_tokens = tokens
        self.context.client_info = await self.store.get_client_info()
        self._expiry_set(expires_at)
        self._initialized = True

    async def _perform_authorization_code_grant(self) -> tuple[str, str]:
        if person_authorizing() is not None:  # someone here answers the page now (the conformance client)
            return await super()._perform_authorization_code_grant()
        # Nobody here: a turn hands the student the page's URL, and the answer comes back to the
        # callback, on any worker and maybe minutes later, so what the exchange needs is stored.
        raise McpAuthorizationRequired(await self._authorization_hand_out())

    async def _authorization_hand_out(self) -> str:
        """The authorization request of the SDK's own flow (`_perform_authorization_code_grant`:
        the same parameters, PKCE S256, `resource`, scope, `prompt=consent` for offline_access),
        its state and verifier stored for the callback (McpOAuthPending); its URL."""
        ctx = self.context
        if ctx.client_info is None or not ctx.client_metadata.redirect_uris:
            raise OAuthFlowError("No client info available for authorization")
        # The student's request still good, for the same scope: the same page (the listing at the
        # turn's start and the call after it would otherwise hand out two).
        same = await db_call(lambda: McpOAuthPending.objects.filter(
            user_id=self.store.user_id, service_id=self.store.service.pk, expires_at__gt=timezone.now(),
            flow__scope=ctx.client_metadata.scope).order_by("-created_at").first())
        if same is not None:
            return same.url
        if ctx.oauth_metadata and ctx.oauth_metadata.authorization_endpoint:
            endpoint = str(ctx.oauth_metadata.authorization_endpoint)
        else:
            endpoint = urljoin(ctx.get_authorization_base_url(ctx.server_url), "/authorize")
        await aoauth_url_check(self.store.service, endpoint)  # never a page on another, unlisted origin
        pkce = PKCEParameters.generate()
        state = secrets.token_urlsafe(32)
        params = {"response_type": "code", "client_id": ctx.client_info.client_id,
                  "redirect_uri": str(ctx.client_metadata.redirect_uris[0]), "state": state,
                  "code_challenge": pkce.code_challenge, "code_challenge_method": "S256"}
        if ctx.should_include_resource_param(ctx.protocol_version):
            params["resource"] = ctx.get_resource_url()
        if ctx.client_metadata.scope:
            params["scope"] = ctx.client_metadata.scope
            if "offline_access" in ctx.client_metadata.scope.split():
                params["prompt"] = "consent"
        flow = {
            "oauth_metadata": ctx.oauth_metadata.model_dump(mode="json") if ctx.oauth_metadata else None,
            "protected_resource_metadata": (ctx.protected_resource_metadata.model_dump(mode="json")
                                            if ctx.protected_resource_metadata else None),
            "auth_server_url": ctx.auth_server_url, "scope": ctx.client_metadata.scope,
            "protocol_version": ctx.protocol_version,
        }
        url = f"{endpoint}?{urlencode(params)}"
        expires_at = timezone.now() + dt.timedelta(seconds=settings.MCP_OAUTH_PENDING_SEC)
        await db_call(lambda: McpOAuthPending.objects.create(
            state=state, user_id=self.store.user_id, service_id=self.store.service.pk,
            verifier_encrypted=secret_encrypt(pkce.code_verifier), url=url, flow=flow, expires_at=expires_at,
        ))
        logger.info("MCP OAuth authorization handed out service={} user={}", self.store.service.name,
                    self.store.user_id)
        return url

    def _flow_restore(self, flow: dict) -> None:
        ctx = self.context
        if flow.get("oauth_metadata"):
            ctx.oauth_metadata = OAuthMetadata.model_validate(flow["oauth_metadata"])
        if flow.get("protected_resource_metadata"):
            ctx.protected_resource_metadata = ProtectedResourceMetadata.model_validate(flow["protected_resource_metadata"])
        ctx.auth_server_url = flow.get("auth_server_url")
        ctx.client_metadata.scope = flow.get("scope")
        ctx.protocol_version = flow.get("protocol_version")

    async def _handle_token_response(self, response: httpx2.Response) -> None:
        await super()._handle_token_response(response)
        self._expiry_set(_expiry_of(self.context.current_tokens))

    async def _handle_refresh_response(self, response: httpx2.Response) -> bool:
        ok = await super()._handle_refresh_response(response)
        if ok:
            self._expiry_set(_expiry_of(self.context.current_tokens))
        return ok

    def _refresh_due(self) -> bool:
        return not self.context.is_token_valid() and self.context.can_refresh_token()

    async def _refresh_lock_take(self) -> str:
        owner = uuid.uuid4().hex
        deadline = time.monotonic() + REFRESH_LOCK_SEC
        while not await cache.aadd(self._lock_key, owner, REFRESH_LOCK_SEC):
            if time.monotonic() > deadline:  # a holder that died: its lease has run out by now
                break
            await asyncio.sleep(REFRESH_LOCK_POLL_SEC)
        return owner

    async def _refresh_lock_release(self, owner: str) -> None:
        if await cache.aget(self._lock_key) == owner:
            await cache.adelete(self._lock_key)

    async def _auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        async with self.context.lock:
            if not self._initialized:
                await self._initialize()
        if self._refresh_due():
            owner = await self._refresh_lock_take()
            try:
                async with self.context.lock:
                    # Another worker (or session) may have refreshed while this one waited: its
                    # tokens are in the database, and the refresh token this one holds is spent.
                    tokens, expires_at = await self.store.grant()
                    if tokens is not None:
                        self.context.current_tokens = tokens
                        self._expiry_set(expires_at)
                    if self._refresh_due():
                        refresh_response = yield await self._refresh_token()
                        if not await self._handle_refresh_response(refresh_response):
                            logger.warning("MCP OAuth refresh refused service={} user={}", self.store.service.name,
                                           self.store.user_id)
            finally:
                await self._refresh_lock_release(owner)
        # The SDK's flow from here: the token is valid (no refresh there), or it is not and the
        # answer's 401 starts the authorization.
        flow = super()._auth_flow(request)
        try:
            outgoing = await flow.__anext__()
            while True:
                response = yield outgoing
                outgoing = await flow.asend(response)
        except StopAsyncIteration:
            return
        finally:
            await flow.aclose()


def _expiry_of(tokens: OAuthToken | None) -> dt.datetime | None:
    if tokens is None or not tokens.expires_in:
        return None
    return timezone.now() + dt.timedelta(seconds=tokens.expires_in)


class SessionTokens:
    """The SDK's TokenStorage in the session's memory: a token of the gateway's own credential,
    which any worker gets again without a person, needs no row."""

    def __init__(self):
        self._tokens: OAuthToken | None = None
        self._client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self._tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self._tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self._client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self._client_info = client_info


class _GuardedClientCredentials(OriginGuard, ClientCredentialsOAuthProvider):
    """The SDK's client-secret provider, its requests kept where they may go (oauth_origins.py)."""


class _GuardedPrivateKeyJWT(OriginGuard, PrivateKeyJWTOAuthProvider):
    """The SDK's private_key_jwt provider, its requests kept where they may go (oauth_origins.py)."""


def gateway_credential_auth(service: McpService) -> httpx2.Auth:
    """The auth of a service the gateway calls as itself (`config.oauth.grant` client_credentials):
    the SDK's client-credentials providers, with a client secret (HTTP Basic) or a private key
    signing each assertion (private_key_jwt, RFC 7523). Discovery as for a student's flow."""
    oauth = oauth_config(service) or {}
    # `issuer`: the credential goes only to that authorization server, whichever one the MCP
    # server names (without it the server decides; the SDK warns, and requires it from 3.0).
    common = {"service": service, "server_url": service.config["url"], "storage": SessionTokens(),
              "client_id": oauth["client_id"],
              "scope": oauth.get("scope") or None, "issuer": oauth.get("issuer") or None}
    if oauth.get("private_key"):
        signing = SignedJWTParameters(issuer=oauth["client_id"], subject=oauth["client_id"],
                                      signing_key=oauth["private_key"],
                                      signing_algorithm=oauth.get("signing_algorithm") or "RS256")
        return _GuardedPrivateKeyJWT(assertion_provider=signing.create_assertion_provider(), **common)
    return _GuardedClientCredentials(client_secret=oauth["client_secret"], **common)


def session_auth(service: McpService, user_id: int | None) -> httpx2.Auth | None:
    """The HTTP auth of one pooled session: a student's (per-student service), the gateway's own
    credential, or none."""
    if oauth_required(service):
        return CampusOAuthProvider(service, user_id)
    oauth = oauth_config(service)
    if oauth is not None and oauth.get("grant") == GATEWAY_CREDENTIAL:
        return gateway_credential_auth(service)
    return None


class McpAuthorizationFailed(Exception):
    """The authorization server's answer could not be taken: `reason` for the student's page
    ("expired": no such request, someone else's, or too old; "refused": the answer does not check
    out, or the server would not exchange its code)."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


def _pending_find(state: str, user_id: int) -> McpOAuthPending | None:
    """The student's pending authorization of that state, still good; left in place: only an
    answer that ends it removes it (`_pending_spend`)."""
    McpOAuthPending.objects.filter(expires_at__lte=timezone.now()).delete()
    return McpOAuthPending.objects.select_related("service").filter(state=state, user_id=user_id).first()


def _pending_spend(pending: McpOAuthPending) -> bool:
    """Removes it; False when another callback already had (a code is taken once)."""
    return McpOAuthPending.objects.filter(pk=pending.pk).delete()[0] > 0


async def authorization_complete(*, state: str, code: str | None, iss: str | None, user_id: int) -> McpService:
    """The callback's half of a handed-out authorization: the issuer of the answer checked
    (RFC 9207), the code exchanged at the token endpoint the discovery found (the SDK's request:
    PKCE verifier, `resource`, the client's authentication), the tokens stored for the student.
    The service it was for; raises McpAuthorizationFailed.

    Only tokens stored end the pending authorization. An answer that does not check out (another
    issuer, no code, a code the server will not exchange) may be an attacker's link or a stale
    tab, not the server's word: the student's own link still works."""
    pending = await db_call(_pending_find, state, user_id)
    if pending is None:
        raise McpAuthorizationFailed("expired")
    service = pending.service
    verifier = secret_decrypt(pending.verifier_encrypted)
    if verifier is None:  # the key changed (SECRET_KEY rotated): this request can never complete
        await db_call(_pending_spend, pending)
        raise McpAuthorizationFailed("expired", "the verifier cannot be read")
    provider = CampusOAuthProvider(service, user_id)
    await provider._initialize()
    provider._flow_restore(pending.flow)
    try:
        validate_authorization_response_iss(iss, provider.context.oauth_metadata)
        if not code:
            raise OAuthFlowError("Authorization response without a code")
        request = await provider._exchange_token_authorization_code(code, verifier)
        await aoauth_url_check(service, str(request.url))
        async with httpx2.AsyncClient(timeout=float(service.timeout_sec), follow_redirects=False) as client:
            response = await client.send(request)
        await provider._handle_token_response(response)
    except (OAuthFlowError, OAuthTokenError, httpx2.HTTPError, ValidationError, McpOAuthRefused) as exc:
        logger.warning("MCP OAuth callback refused service={} user={} reason={}", service.name, user_id, exc)
        raise McpAuthorizationFailed("refused", str(exc)) from exc
    await db_call(_pending_spend, pending)
    logger.info("MCP OAuth authorization completed service={} user={}", service.name, user_id)
    return service


async def authorization_declined(*, state: str, iss: str | None, user_id: int) -> McpService:
    """The student said no at the authorization page: their pending request is dropped; the
    service it was for. Raises McpAuthorizationFailed: "expired" when there is none of theirs,
    "refused" (and the request stays) when the answer names another issuer than the server's
    (RFC 9207; one that names none is taken: servers often leave `iss` out of errors)."""
    pending = await db_call(_pending_find, state, user_id)
    if pending is None:
        raise McpAuthorizationFailed("expired")
    metadata = (pending.flow or {}).get("oauth_metadata")
    if iss is not None:
        try:
            validate_authorization_response_iss(iss, OAuthMetadata.model_validate(metadata) if metadata else None)
        except (OAuthFlowError, ValidationError) as exc:
            logger.warning("MCP OAuth decline refused service={} user={} reason={}", pending.service.name, user_id,
                           exc)
            raise McpAuthorizationFailed("refused", str(exc)) from exc
    if not await db_call(_pending_spend, pending):
        raise McpAuthorizationFailed("expired")
    logger.info("MCP OAuth authorization declined service={} user={}", pending.service.name, user_id)
    return pending.service


class _HandOutIsNotAnError(logging.Filter):
    """The SDK logs every exception out of its flow as "OAuth flow error" with a traceback; the
    authorization handed out to a student (McpAuthorizationRequired) is the flow working, and a
    refused request (McpOAuthRefused) has its own line."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        # A refused request is logged once, with its reason, where it is refused (oauth_origins.py).
        return not isinstance(exc, McpAuthorizationRequired | McpOAuthRefused)


logging.getLogger("mcp.client.auth.oauth2").addFilter(_HandOutIsNotAnError())
