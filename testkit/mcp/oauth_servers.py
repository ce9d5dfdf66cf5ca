"""An OAuth-protected MCP server on loopback, for end-to-end tests of per-student MCP OAuth.

One app on one port plays both parts, as a small campus service does, built from the mcp SDK's
own server-side auth (`MCPServer` with `auth_server_provider` and `AuthSettings`):

- the authorization server, issuer = `root_url`: RFC 8414 metadata at
  `/.well-known/oauth-authorization-server` (PKCE S256, RFC 9207 `iss` in the authorization
  response, `registration_endpoint` when `dcr`, `client_id_metadata_document_supported` when
  `cimd`), `/authorize`, `/token` (authorization_code, refresh_token with rotation), `/register`
  (RFC 7591, when `dcr`) and `/revoke` (RFC 7009);
- the resource server: streamable-http MCP at `/mcp`. Every request needs a Bearer token this
  server issued, unexpired and with `required_scopes`: 401 (no or bad token) or 403
  `insufficient_scope`, both with `WWW-Authenticate: Bearer … resource_metadata="…"` pointing at
  the RFC 9728 metadata, `/.well-known/oauth-protected-resource/mcp`.

There is no login page: `/authorize` signs in as `server.subject` and redirects straight back
to the client with `code`, `state` and `iss`, as an authorization server does for a student
already logged in there. The SDK's handlers validate the request first (client_id,
redirect_uri, scope, PKCE: a request without `code_challenge` is refused). Tools: `whoami` (the
token's subject) and `add(a, b)`.

Clients: registered dynamically (`dcr`), pre-registered (`preregistered`, client_id → secret;
None for a public client; a client with a secret authenticates with client_secret_basic or
client_secret_post, as it likes; any redirect_uri is accepted for them, since a test cannot
know the project's callback URL before it starts), or, with `cimd`, a URL client_id whose
metadata document this server fetches, or finds in `client_metadata_documents` (URL → document,
which a test fills: the SDK's client only sends an https URL, which no loopback test serves).

What it is asked and issues is recorded (`hits`: every request's method and path;
`authorize_requests`, `token_requests`, `registrations`, `revocation_requests`, `tokens`,
`refresh_tokens`), made anew by `reset()`. A hostile server: `resource_metadata_url`, when a test
sets it, is the `resource_metadata` its 401s and 403s name instead of its own.
"""
from __future__ import annotations

import asyncio
import base64
import binascii
import contextvars
import json
import math
import re
import secrets
import socket
import threading
import time
from typing import Self
from urllib.parse import parse_qsl, unquote, urlencode

import httpx
from mcp.server.auth.handlers.metadata import MetadataHandler
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    AuthorizeError,
    OAuthAuthorizationServerProvider,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.server.auth.routes import build_metadata, cors_middleware
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import InvalidRedirectUriError, OAuthClientInformationFull, OAuthMetadata, OAuthToken
from pydantic import AnyUrl, ValidationError
from starlette.routing import Route

from testkit.servers import ServedApp, ThreadedAsgiServer

CODE_TTL_SEC = 300
AS_METADATA_PATH = "/.well-known/oauth-authorization-server"
GRANT_TYPES = ["authorization_code", "refresh_token"]
# The endpoints whose requests are recorded; the key is (method, path).
_RECORDED = {("POST", "/token"), ("POST", "/register"), ("POST", "/revoke"), ("POST", "/authorize")}

# The form of the /token or /revoke request being handled, and whether it came with HTTP Basic
# credentials: the SDK calls the provider's hooks without the request, and a pre-registered
# client's record must name the method the request actually used (see `_Provider.get_client`).
_current_request: contextvars.ContextVar[dict | None] = contextvars.ContextVar("oauth_test_request", default=None)


class _PreregisteredClient(OAuthClientInformationFull):
    """A pre-registered client takes whatever redirect_uri it sends: the project's callback URL
    (a live server's port) is not known when the test builds this server. The SDK still checks
    that /token repeats the one /authorize got."""

    def validate_redirect_uri(self, redirect_uri: AnyUrl | None) -> AnyUrl:
        if redirect_uri is None:
            raise InvalidRedirectUriError("redirect_uri is required")
        return redirect_uri


class _PreboundServer(ThreadedAsgiServer):
    """Serves on a socket bound before the app is built: the SDK wants the issuer and the
    resource URL (hence the port) when the app is made, and an OS-picked port is known only once
    bound. Binding first, rather than probing for a free port, leaves no window for another
    process to take it."""

    def __init__(self, app, sock: socket.socket, *, lifespan: str):
        super().__init__(app, host="127.0.0.1", port=sock.getsockname()[1], lifespan=lifespan)
        self._sock = sock

    async def _serve(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._main = asyncio.current_task()
        await self.server.serve(sockets=[self._sock])


class OAuthMcpServer(ServedApp):
    """An MCP server (streamable-http, path /mcp) whose every request needs a Bearer token issued
    by its own authorization server, served by the same app on the same port (issuer = root_url).

    `subject` is who /authorize logs in as (a test sets it before a flow); `token_ttl_sec` how
    long an access token lives (1: the next call a second later needs a refresh);
    `metadata_changes` fields of its RFC 8414 metadata (an endpoint elsewhere). Records:
    `authorize_requests` (the query of each /authorize), `token_requests` (the form of each
    POST /token, with its Authorization header under "authorization"), `registrations` (each
    DCR body), `revocation_requests` (the form of each POST /revoke), `tokens` (access token →
    {"subject", "scopes", "expires_at", "client_id", "resource"}) and `refresh_tokens` (refresh
    token → {"subject", "scopes", "client_id", "resource"}). A refresh token works once; using
    it again answers invalid_grant and revokes every token of its subject, as an authorization
    server does on reuse. `revoke_all()` forgets every token (the next call gets 401)."""

    lifespan = "on"  # the streamable-http session manager runs in the app's lifespan

    def __init__(self, *, required_scopes=("library",), token_ttl_sec: int = 3600, dcr: bool = True,
                 cimd: bool = False, preregistered: dict[str, str | None] | None = None,
                 metadata_changes: dict | None = None):
        self.required_scopes = list(required_scopes)
        self.metadata_changes = dict(metadata_changes or {})  # fields of its RFC 8414 metadata, as a hostile server names them
        self.token_ttl_sec = token_ttl_sec
        self.dcr, self.cimd = dcr, cimd
        self.preregistered = dict(preregistered or {})
        self.subject = "alice"
        self._lock = threading.Lock()  # the records are changed on the server's loop and read (or revoked) by tests
        self._provider = _Provider(self)
        self._inner = None  # the SDK's Starlette app, built by serve() once the port is known
        self._issuer = ""  # the issuer exactly as the metadata renders it, for `iss`
        self._state_init()

        async def app(scope, receive, send):  # a plain function: uvicorn reads it as ASGI 3
            return await self._recording(scope, receive, send)

        self.app = app

    def _state_init(self) -> None:
        self.hits: list[tuple[str, str]] = []
        self.resource_metadata_url: str | None = None
        self.authorize_requests: list[dict] = []
        self.token_requests: list[dict] = []
        self.registrations: list[dict] = []
        self.revocation_requests: list[dict] = []
        self.client_metadata_documents: dict[str, dict] = {}  # CIMD client_id URL → its document, not fetched
        self.tokens: dict[str, dict] = {}
        self.refresh_tokens: dict[str, dict] = {}
        # The authorization server's own state: registered clients (dynamic and CIMD ones),
        # codes not yet exchanged, spent refresh tokens (→ their subject, to spot a reuse).
        self._clients: dict[str, OAuthClientInformationFull] = {}
        self._codes: dict[str, AuthorizationCode] = {}
        self._spent_refresh: dict[str, str] = {}

    def serve(self) -> Self:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind(("127.0.0.1", 0))
            self._inner = self._build(f"http://127.0.0.1:{sock.getsockname()[1]}")
            self._server = _PreboundServer(self.app, sock, lifespan=self.lifespan).start()
        except BaseException:
            sock.close()
            raise
        self._pristine = dict(vars(self))
        return self

    @property
    def url(self) -> str:
        """What an McpService config points at."""
        return f"{self.root_url}/mcp"

    @property
    def issuer(self) -> str:
        return self.root_url

    def revoke_all(self) -> None:
        """Forgets every access and refresh token: the next MCP request gets 401."""
        with self._lock:
            self.tokens.clear()
            self.refresh_tokens.clear()

    # --- building the app ------------------------------------------------------------------

    def _build(self, origin: str):
        scopes = self.required_scopes
        settings = AuthSettings(
            issuer_url=origin,
            resource_server_url=f"{origin}/mcp",
            required_scopes=scopes,
            client_registration_options=ClientRegistrationOptions(enabled=self.dcr, valid_scopes=scopes,
                                                                  default_scopes=scopes),
            revocation_options=RevocationOptions(enabled=True),
            # The SDK's check would refuse a token issued without `resource` too; this server
            # refuses a foreign resource at /authorize and /token instead (invalid_target) and
            # records what was asked, so a test sees a client that leaves it out.
            validate_token_resource=False,
        )
        server = MCPServer("campus-oauth-test", log_level="WARNING", auth=settings,
                           auth_server_provider=self._provider)

        @server.tool(description="当前令牌代表的用户。Who the access token speaks for (its subject).")
        def whoami() -> str:
            token = get_access_token()
            return (token.subject or "") if token else ""

        @server.tool(description="把两个整数相加。Add two integers.")
        def add(a: int, b: int) -> int:
            return a + b

        app = server.streamable_http_app()
        # The SDK's metadata advertises neither RFC 9207 `iss` (which /authorize sends: an SDK
        # client then requires it) nor client ID metadata documents, and build_metadata() takes
        # no option for them; serve the same document with the two fields set.
        metadata = build_metadata(settings.issuer_url, None, settings.client_registration_options,
                                  settings.revocation_options)
        metadata.authorization_response_iss_parameter_supported = True
        if self.cimd:
            metadata.client_id_metadata_document_supported = True
        metadata = OAuthMetadata.model_validate({**metadata.model_dump(mode="json"), **self.metadata_changes})
        self._issuer = str(metadata.issuer)
        routes = app.router.routes
        index = next(i for i, route in enumerate(routes) if getattr(route, "path", None) == AS_METADATA_PATH)
        routes[index] = Route(AS_METADATA_PATH, endpoint=cors_middleware(MetadataHandler(metadata).handle,
                                                                         ["GET", "OPTIONS"]),
                              methods=["GET", "OPTIONS"])
        return app

    # --- recording -------------------------------------------------------------------------

    async def _recording(self, scope, receive, send):
        if scope["type"] != "http":
            return await self._inner(scope, receive, send)
        method, path = scope["method"], scope["path"]
        self.hits.append((method, path))
        if self.resource_metadata_url is not None:
            send = _resource_metadata_named(send, self.resource_metadata_url)
        if method == "GET" and path == "/authorize":
            query = scope["query_string"].decode("latin-1")
            self.authorize_requests.append(dict(parse_qsl(query, keep_blank_values=True)))
        if (method, path) not in _RECORDED:
            return await self._inner(scope, receive, send)
        body = await _read_body(receive)
        if path == "/register":
            try:
                self.registrations.append(json.loads(body))
            except ValueError:
                self.registrations.append({"_body": body.decode("utf-8", "replace")})
            return await self._inner(scope, _replay(body, receive), send)
        pairs = parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True)
        form = dict(pairs)
        if path == "/authorize":
            self.authorize_requests.append(form)
            return await self._inner(scope, _replay(body, receive), send)
        headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]}
        record = dict(form)
        if "authorization" in headers:
            record["authorization"] = headers["authorization"]
        (self.token_requests if path == "/token" else self.revocation_requests).append(record)
        basic = _basic_client_id(headers.get("authorization"))
        if basic is not None and "client_id" not in form:
            # RFC 6749 §2.3.1 lets a client_secret_basic client leave client_id out of the form;
            # the SDK's handlers read it from the form only, so copy it there from the header.
            body = urlencode([*pairs, ("client_id", basic)]).encode()
            scope = dict(scope, headers=[(name, value) for name, value in scope["headers"]
                                         if name.lower() != b"content-length"]
                         + [(b"content-length", str(len(body)).encode())])
        token = _current_request.set({"path": path, "form": form, "basic": basic is not None})
        try:
            return await self._inner(scope, _replay(body, receive), send)
        finally:
            _current_request.reset(token)

    # --- helpers for the provider ----------------------------------------------------------

    def _own_resource(self, resource: str) -> bool:
        return resource.rstrip("/").lower() == self.url.rstrip("/").lower()

    def _issue(self, *, client_id: str, subject: str, scopes: list[str], resource: str | None,
               refresh_scopes: list[str] | None = None) -> OAuthToken:
        access, refresh = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        ttl = self.token_ttl_sec
        with self._lock:
            self.tokens[access] = {"subject": subject, "scopes": list(scopes), "expires_at": time.time() + ttl,
                                   "client_id": client_id, "resource": resource}
            self.refresh_tokens[refresh] = {"subject": subject, "scopes": list(refresh_scopes or scopes),
                                            "client_id": client_id, "resource": resource}
        return OAuthToken(access_token=access, token_type="Bearer", expires_in=ttl, scope=" ".join(scopes),
                          refresh_token=refresh)

    def _revoke_subject(self, subject: str) -> None:
        with self._lock:
            for records in (self.tokens, self.refresh_tokens):
                for token in [token for token, record in records.items() if record["subject"] == subject]:
                    del records[token]

    async def _client_from_document(self, url: str) -> OAuthClientInformationFull | None:
        """A client ID metadata document (CIMD): the client_id is the URL of its own metadata,
        taken from `client_metadata_documents` when a test put it there (the SDK's client wants
        an https URL, which no loopback test serves), else fetched (plain http too)."""
        document = self.client_metadata_documents.get(url)
        if document is None:
            try:
                async with httpx.AsyncClient(timeout=5.0, follow_redirects=False) as http:
                    response = await http.get(url, headers={"Accept": "application/json"})
                document = response.json() if response.status_code == 200 else None
            except (httpx.HTTPError, ValueError):
                return None
        if not isinstance(document, dict) or document.get("client_id") != url:
            return None
        try:
            # A CIMD client is public (no secret to check, and this server keeps no keys for
            # private_key_jwt): whatever method its document names, /token takes it unauthenticated.
            client = OAuthClientInformationFull(
                client_id=url, redirect_uris=document.get("redirect_uris"), token_endpoint_auth_method="none",
                grant_types=document.get("grant_types") or GRANT_TYPES, client_name=document.get("client_name"),
                scope=document.get("scope") or " ".join(self.required_scopes),
            )
        except ValidationError:
            return None
        with self._lock:
            self._clients[url] = client
        return client


class _Provider(OAuthAuthorizationServerProvider[AuthorizationCode, RefreshToken, AccessToken]):
    """The SDK's authorization-server hooks over the double's records. The SDK's handlers do the
    protocol checks (client authentication, redirect_uri, PKCE, code expiry, the code's client,
    scope narrowing); these hooks only store and look up."""

    def __init__(self, double: OAuthMcpServer):
        self.double = double

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        double = self.double
        with double._lock:
            client = double._clients.get(client_id)
        if client is not None:
            return client
        if client_id in double.preregistered:
            secret = double.preregistered[client_id]
            current = _current_request.get()
            if secret is None:
                method = "none"
            elif current is not None and current["basic"]:
                method = "client_secret_basic"
            else:
                method = "client_secret_post"
            return _PreregisteredClient(client_id=client_id, client_secret=secret, token_endpoint_auth_method=method,
                                        grant_types=GRANT_TYPES, scope=" ".join(double.required_scopes))
        if double.cimd and client_id.startswith(("https://", "http://")):
            return await double._client_from_document(client_id)
        return None

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        with self.double._lock:
            self.double._clients[client_info.client_id] = client_info

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        double = self.double
        if params.resource is not None and not double._own_resource(params.resource):
            raise AuthorizeError("invalid_target", f"unknown resource {params.resource}")
        if params.scopes is not None:
            scopes = params.scopes
        else:  # no scope asked: what the client registered with, else what the resource needs
            scopes = client.scope.split() if client.scope else list(double.required_scopes)
        code = AuthorizationCode(
            code=secrets.token_urlsafe(32), scopes=scopes, expires_at=time.time() + CODE_TTL_SEC,
            client_id=client.client_id, code_challenge=params.code_challenge, redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly, resource=params.resource,
            subject=double.subject,
        )
        with double._lock:
            double._codes[code.code] = code
        # No consent page: straight back to the client, with the RFC 9207 issuer.
        return construct_redirect_uri(str(params.redirect_uri), code=code.code, state=params.state,
                                      iss=double._issuer)

    async def load_authorization_code(self, client: OAuthClientInformationFull,
                                      authorization_code: str) -> AuthorizationCode | None:
        with self.double._lock:
            return self.double._codes.get(authorization_code)

    async def exchange_authorization_code(self, client: OAuthClientInformationFull,
                                          authorization_code: AuthorizationCode) -> OAuthToken:
        with self.double._lock:
            code = self.double._codes.pop(authorization_code.code, None)
        if code is None:  # two exchanges of one code racing: the loser finds it gone
            raise TokenError("invalid_grant", "authorization code already used")
        return self.double._issue(client_id=code.client_id, subject=code.subject or "", scopes=code.scopes,
                                  resource=self._token_resource(code.resource))

    async def load_refresh_token(self, client: OAuthClientInformationFull, refresh_token: str) -> RefreshToken | None:
        double = self.double
        with double._lock:
            record = double.refresh_tokens.get(refresh_token)
            reused = double._spent_refresh.get(refresh_token) if record is None else None
        if record is None:
            current = _current_request.get()
            # A spent refresh token presented again (at /token; /revoke only looks it up): the
            # token family may be stolen, so everything its subject holds stops working.
            if reused is not None and current is not None and current["path"] == "/token":
                double._revoke_subject(reused)
            return None
        return RefreshToken(token=refresh_token, client_id=record["client_id"], scopes=record["scopes"],
                            resource=record["resource"], subject=record["subject"])

    async def exchange_refresh_token(self, client: OAuthClientInformationFull, refresh_token: RefreshToken,
                                     scopes: list[str]) -> OAuthToken:
        double = self.double
        with double._lock:
            record = double.refresh_tokens.pop(refresh_token.token, None)
            if record is not None:
                double._spent_refresh[refresh_token.token] = record["subject"]
        if record is None:  # revoked or spent between the SDK's lookup and now
            raise TokenError("invalid_grant", "refresh token already used")
        # Rotated: a new refresh token with the grant's full scope, an access token with the
        # (possibly narrower) scope asked for.
        return double._issue(client_id=record["client_id"], subject=record["subject"], scopes=scopes,
                             resource=self._token_resource(record["resource"]), refresh_scopes=record["scopes"])

    async def load_access_token(self, token: str) -> AccessToken | None:
        double = self.double
        with double._lock:
            record = double.tokens.get(token)
        if record is None or record["expires_at"] < time.time():
            return None
        return AccessToken(token=token, client_id=record["client_id"], scopes=record["scopes"],
                           expires_at=math.ceil(record["expires_at"]), resource=record["resource"],
                           subject=record["subject"], claims={"iss": double._issuer})

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        with self.double._lock:
            self.double.tokens.pop(token.token, None)
            self.double.refresh_tokens.pop(token.token, None)

    def _token_resource(self, granted: str | None) -> str | None:
        """RFC 8707 at /token: the resource the request names (it must be this server's), else
        the one the grant was made for."""
        current = _current_request.get()
        requested = current["form"].get("resource") if current else None
        if requested is None:
            return granted
        if not self.double._own_resource(requested):
            raise TokenError("invalid_target", f"unknown resource {requested}")
        return requested


def _basic_client_id(header: str | None) -> str | None:
    """The client_id of HTTP Basic client credentials (RFC 6749 §2.3.1), or None."""
    if not header or not header.lower().startswith("basic "):
        return None
    try:
        decoded = base64.b64decode(header[6:], validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    client_id, colon, _ = decoded.partition(":")
    return unquote(client_id) if colon else None


async def _read_body(receive) -> bytes:
    chunks, more = [], True
    while more:
        message = await receive()
        if message["type"] != "http.request":  # the client went away
            break
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    return b"".join(chunks)


def _resource_metadata_named(send, url: str):
    """A `send` whose 401 and 403 name `url` as their RFC 9728 `resource_metadata`."""

    async def sending(message):
        if message["type"] == "http.response.start" and message["status"] in (401, 403):
            headers = [(name, re.sub(rb'resource_metadata="[^"]*"', f'resource_metadata="{url}"'.encode(), value)
                        if name.lower() == b"www-authenticate" else value) for name, value in message["headers"]]
            message = {**message, "headers": headers}
        await send(message)

    return sending


def _replay(body: bytes, receive):
    """A `receive` that hands the app the body already read, then the connection's own events."""
    replayed = False

    async def replay():
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


class _IssuerVerifier:
    """The resource server's check of a Bearer token issued elsewhere: `verify(token)` gives the
    token's subject, or None when it is not a live token of that issuer."""

    def __init__(self, verify, scopes: list[str]):
        self.verify, self.scopes = verify, scopes

    async def verify_token(self, token: str) -> AccessToken | None:
        subject = self.verify(token)
        if subject is None:
            return None
        return AccessToken(token=token, client_id="campus", scopes=self.scopes, subject=subject)


class ResourceMcpServer(OAuthMcpServer):
    """An MCP server (streamable-http, /mcp) that is a resource server only: its tokens come from
    another authorization server, `issuer` (the campus OpenID Connect provider,
    testkit/identity/oidc_provider.py), which its RFC 9728 metadata names; `verify(token)` → the
    token's subject or None (the provider's own record: an introspection). Tools as above."""

    def __init__(self, *, issuer: str, verify, required_scopes=("openid",)):
        super().__init__(required_scopes=required_scopes, dcr=False)
        self._external_issuer, self._verify = issuer, verify

    @property
    def issuer(self) -> str:
        return self._external_issuer

    def _build(self, origin: str):
        settings = AuthSettings(issuer_url=self._external_issuer, resource_server_url=f"{origin}/mcp",
                                required_scopes=self.required_scopes, validate_token_resource=False)
        server = MCPServer("campus-resource-test", log_level="WARNING", auth=settings,
                           token_verifier=_IssuerVerifier(self._verify, self.required_scopes))

        @server.tool(description="当前令牌代表的用户。Who the access token speaks for (its subject).")
        def whoami() -> str:
            token = get_access_token()
            return (token.subject or "") if token else ""

        return server.streamable_http_app()
