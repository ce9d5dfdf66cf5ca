"""A campus OpenID Connect provider on loopback, for tests and local trials (issue 13).

Real HTTP (uvicorn), real redirects, a real token exchange: discovery, `/authorize` (code flow;
PKCE S256 required), `/token` (authorization_code with the verifier, refresh_token with
rotation; client_secret_basic or client_secret_post), `/userinfo`, `/jwks` (an RSA key made at
start; ID tokens RS256), `/revoke` (RFC 7009). There is no login form: `/authorize` signs in
as `provider.account` and redirects straight back, as a provider does for a student who is
already logged in there.

Everything it issues and is asked is recorded (`codes`, `access`, `refresh`, `revoked`,
`token_requests`), so tests can check what the gateway did.
"""
import base64
import hashlib
import secrets
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlencode

from joserfc import jwt
from joserfc.jwk import RSAKey
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse
from starlette.routing import Route

from testkit.servers import ServedApp

CLIENT_ID = "campus-agent"
CLIENT_SECRET = "campus-agent-secret"


@dataclass
class Account:
    sub: str = "2023010001"
    name: str = "林同学"
    roles: list[str] = field(default_factory=lambda: ["student"])


@dataclass
class Grant:
    account: Account
    expires_at: float


class OidcProvider(ServedApp):
    def __init__(self, *, client_id: str = CLIENT_ID, client_secret: str = CLIENT_SECRET, access_ttl: int = 300):
        self.client_id, self.client_secret = client_id, client_secret
        self.access_ttl = access_ttl  # seconds an access token lives
        self.key = RSAKey.generate_key(2048, parameters={"kid": secrets.token_hex(4), "alg": "RS256", "use": "sig"})
        self._lock = threading.Lock()
        self._state_init()
        self.app = Starlette(routes=[
            Route("/.well-known/openid-configuration", self._discovery),
            Route("/authorize", self._authorize),
            Route("/token", self._token, methods=["POST"]),
            Route("/userinfo", self._userinfo),
            Route("/jwks", self._jwks),
            Route("/revoke", self._revoke, methods=["POST"]),
        ])

    def _state_init(self) -> None:
        self.account = Account()
        self.id_token_overrides: dict = {}  # claims to put in (or over) the next ID tokens: hostile-provider tests
        self.codes: dict[str, dict] = {}
        self.access: dict[str, Grant] = {}
        self.refresh: dict[str, Account] = {}
        self.revoked: list[str] = []
        self.token_requests: list[dict] = []
        self.authorize_requests: list[dict] = []

    @property
    def issuer(self) -> str:
        return self.root_url

    def __enter__(self) -> "OidcProvider":
        return self.serve()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def expire_access_tokens(self) -> None:
        """Every access token issued so far stops working (the campus token "expired")."""
        with self._lock:
            for grant in self.access.values():
                grant.expires_at = 0

    def access_token_valid(self, token: str) -> bool:
        grant = self.access.get(token)
        return grant is not None and token not in self.revoked and grant.expires_at > time.time()

    def access_subject(self, token: str) -> str | None:
        """The account an access token speaks for, while it is live (what a resource server of
        this provider learns by introspection); None for any other token."""
        return self.access[token].account.sub if self.access_token_valid(token) else None

    # --- endpoints ----------------------------------------------------------------------------

    async def _discovery(self, request: Request) -> JSONResponse:
        base = self.issuer
        return JSONResponse({
            "issuer": base,
            "authorization_endpoint": f"{base}/authorize",
            "token_endpoint": f"{base}/token",
            "userinfo_endpoint": f"{base}/userinfo",
            "jwks_uri": f"{base}/jwks",
            "revocation_endpoint": f"{base}/revoke",
            "response_types_supported": ["code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
        })

    async def _authorize(self, request: Request):
        q = dict(request.query_params)
        self.authorize_requests.append(q)
        redirect_uri = q.get("redirect_uri", "")
        if q.get("client_id") != self.client_id or not redirect_uri.startswith("http"):
            return PlainTextResponse("unknown client or redirect_uri", status_code=400)
        problem = None
        if q.get("response_type") != "code" or "openid" not in q.get("scope", "").split():
            problem = "unsupported_response_type"
        elif q.get("code_challenge_method") != "S256" or not q.get("code_challenge"):
            problem = "invalid_request"  # this provider, like the campus one, requires PKCE
        if problem:
            return RedirectResponse(f"{redirect_uri}?{urlencode({'error': problem, 'state': q.get('state', '')})}", 302)
        code = secrets.token_urlsafe(24)
        with self._lock:
            self.codes[code] = {
                "redirect_uri": redirect_uri, "challenge": q["code_challenge"], "nonce": q.get("nonce"),
                "account": self.account, "used": False,
            }
        return RedirectResponse(f"{redirect_uri}?{urlencode({'code': code, 'state': q.get('state', '')})}", 302)

    def _client_authenticated(self, request: Request, form) -> bool:
        header = request.headers.get("authorization", "")
        if header.lower().startswith("basic "):
            try:
                client_id, _, secret = base64.b64decode(header[6:]).decode().partition(":")
            except ValueError:
                return False
        else:
            client_id, secret = form.get("client_id"), form.get("client_secret")
        return client_id == self.client_id and secret == self.client_secret

    async def _token(self, request: Request) -> JSONResponse:
        form = await request.form()
        self.token_requests.append({k: v for k, v in form.items() if k not in ("client_secret",)})
        if not self._client_authenticated(request, form):
            return JSONResponse({"error": "invalid_client"}, status_code=401)
        grant_type = form.get("grant_type")
        if grant_type == "authorization_code":
            return self._code_exchange(form)
        if grant_type == "refresh_token":
            return self._refresh(form)
        return JSONResponse({"error": "unsupported_grant_type"}, status_code=400)

    def _code_exchange(self, form) -> JSONResponse:
        with self._lock:
            issued = self.codes.get(form.get("code", ""))
            if issued is None or issued["used"]:
                return JSONResponse({"error": "invalid_grant"}, status_code=400)
            issued["used"] = True
        verifier = form.get("code_verifier", "")
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        if form.get("redirect_uri") != issued["redirect_uri"] or challenge != issued["challenge"]:
            return JSONResponse({"error": "invalid_grant"}, status_code=400)
        return JSONResponse(self._issue(issued["account"], nonce=issued["nonce"]))

    def _refresh(self, form) -> JSONResponse:
        token = form.get("refresh_token", "")
        with self._lock:
            account = self.refresh.pop(token, None)  # rotated: each refresh token works once
        if account is None or token in self.revoked:
            return JSONResponse({"error": "invalid_grant"}, status_code=400)
        return JSONResponse(self._issue(account, nonce=None))

    def _issue(self, account: Account, *, nonce: str | None) -> dict:
        now = int(time.time())
        access, refresh = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        claims = {"iss": self.issuer, "aud": self.client_id, "sub": account.sub, "name": account.name,
                  "iat": now, "exp": now + 600}
        if nonce:
            claims["nonce"] = nonce
        claims.update(self.id_token_overrides)
        id_token = jwt.encode({"alg": "RS256", "kid": self.key.kid}, claims, self.key)
        with self._lock:
            self.access[access] = Grant(account=account, expires_at=now + self.access_ttl)
            self.refresh[refresh] = account
        return {"access_token": access, "token_type": "Bearer", "expires_in": self.access_ttl,
                "refresh_token": refresh, "id_token": id_token, "scope": "openid profile offline_access"}

    async def _userinfo(self, request: Request) -> JSONResponse:
        header = request.headers.get("authorization", "")
        token = header[7:] if header.lower().startswith("bearer ") else ""
        if not self.access_token_valid(token):
            return JSONResponse({"error": "invalid_token"}, status_code=401)
        account = self.access[token].account
        return JSONResponse({"sub": account.sub, "name": account.name, "roles": account.roles})

    async def _jwks(self, request: Request) -> JSONResponse:
        return JSONResponse({"keys": [self.key.as_dict(private=False)]})

    async def _revoke(self, request: Request) -> PlainTextResponse:
        form = await request.form()
        if not self._client_authenticated(request, form):
            return PlainTextResponse("", status_code=401)
        token = form.get("token", "")
        with self._lock:
            self.revoked.append(token)
            self.refresh.pop(token, None)
        return PlainTextResponse("", status_code=200)
