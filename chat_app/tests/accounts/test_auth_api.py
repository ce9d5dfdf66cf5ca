"""Auth per docs/design.md#cross-cutting-rules through the real ASGI app: JWT issue/verify, SSO, logout, CSRF, 401 bodies."""
import base64
import hashlib
import hmac
import json
import threading
from datetime import timedelta

import httpx
import jwt
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.utils import timezone
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from chat_app.accounts.tokens import jwt_decode
from chat_app.models import AuthSession, CampusIdentity
from testkit.servers import ServedApp

pytestmark = pytest.mark.django_db(transaction=True)

GOOD_CAMPUS_TOKEN = "campus-good-token-7f3a9b2c4d5e6f70"


def _b64(data: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def _claims(user, session, **override) -> dict:
    now = timezone.now()
    claims = {
        "sub": str(user.pk),
        "sid": str(session.id),
        "roles": ["student"],
        "iss": settings.JWT_ISSUER,
        "iat": int(now.timestamp()),
        "exp": int((now + timedelta(hours=1)).timestamp()),
    }
    claims.update(override)
    return {k: v for k, v in claims.items() if v is not None}


def _session(user) -> AuthSession:
    return AuthSession.objects.create(
        user=user, password_fingerprint=user.get_session_auth_hash(), expires_at=timezone.now() + timedelta(hours=1)
    )


def _get(base, path, token=None, **kw):
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    return httpx.get(f"{base}{path}", headers=headers, timeout=10, **kw)


# --- POST /api/v1/auth/token ------------------------------------------------------------------
def test_password_login_issues_a_verifiable_jwt(live_asgi, user, password):
    response = httpx.post(f"{live_asgi}/api/v1/auth/token", json={"username": user.username, "password": password})
    assert response.status_code == 200
    body = response.json()
    assert body["token_type"] == "Bearer"
    assert body["expires_in"] == settings.JWT_TTL_HOURS * 3600
    header = jwt.get_unverified_header(body["access_token"])
    assert header["alg"] == "HS256"
    claims = jwt_decode(token=body["access_token"])
    assert claims["sub"] == str(user.pk)
    assert claims["exp"] - claims["iat"] == settings.JWT_TTL_HOURS * 3600
    assert claims["iss"] == settings.JWT_ISSUER
    session = AuthSession.objects.get(id=claims["sid"])
    assert session.user == user and session.campus_token == ""
    assert response.headers["X-Request-Id"]
    assert _get(live_asgi, "/api/v1/conversations", body["access_token"]).status_code == 200


@pytest.mark.parametrize(
    "body",
    [{"username": "20230001", "password": "wrong"}, {"username": "nobody", "password": "x"}],
)
def test_password_login_rejects_bad_credentials(live_asgi, user, body):
    response = httpx.post(f"{live_asgi}/api/v1/auth/token", json=body)
    assert response.status_code == 401
    assert response.json() == {"code": 40103, "message": "用户名或密码错误。"}
    assert not AuthSession.objects.exists()


def test_password_login_validates_the_body(live_asgi, db):
    response = httpx.post(f"{live_asgi}/api/v1/auth/token", json={"username": "x"})
    assert response.status_code == 400
    assert response.json()["code"] == 40001


# --- JWT verification (REST and stream) --------------------------------------------------------
def _forged_tokens(user, other_user) -> dict[str, str]:
    session = _session(user)
    key = settings.SECRET_KEY
    good = _claims(user, session)
    signed = jwt.encode(good, key, algorithm="HS256")
    head, payload, signature = signed.split(".")
    tampered_payload = _b64({**good, "sub": str(other_user.pk)})
    return {
        "alg_none": f"{_b64({'alg': 'none', 'typ': 'JWT'})}.{payload}.",
        "wrong_key": jwt.encode(good, "another-secret-key-of-sufficient-length-000", algorithm="HS256"),
        "hs512_same_key": jwt.encode(good, key, algorithm="HS512"),
        "expired": jwt.encode(
            _claims(user, session, iat=int((timezone.now() - timedelta(hours=30)).timestamp()),
                    exp=int((timezone.now() - timedelta(hours=6)).timestamp())),
            key, algorithm="HS256",
        ),
        "no_exp": jwt.encode(_claims(user, session, exp=None), key, algorithm="HS256"),
        "no_iat": jwt.encode(_claims(user, session, iat=None), key, algorithm="HS256"),
        "no_iss": jwt.encode(_claims(user, session, iss=None), key, algorithm="HS256"),
        "wrong_iss": jwt.encode(_claims(user, session, iss="someone-else"), key, algorithm="HS256"),
        "no_sid": jwt.encode(_claims(user, session, sid=None), key, algorithm="HS256"),
        "unknown_sid": jwt.encode(_claims(user, session, sid="5f1c2d3e-0000-4000-8000-000000000000"), key, algorithm="HS256"),
        "sid_of_other_user": jwt.encode(_claims(other_user, session), key, algorithm="HS256"),
        "tampered_sub": f"{head}.{tampered_payload}.{signature}",
        "garbage": "not-a-jwt",
    }


@pytest.mark.filterwarnings("ignore::jwt.warnings.InsecureKeyLengthWarning")  # the HS512 forgery
def test_forged_and_broken_jwts_are_refused_everywhere(live_asgi, user, other_user):
    tokens = _forged_tokens(user, other_user)
    for name, token in tokens.items():
        rest = _get(live_asgi, "/api/v1/conversations", token)
        assert rest.status_code == 401, name
        assert rest.json() == {"code": 40101, "message": "token_invalid"}, name
        assert rest.headers["WWW-Authenticate"].startswith("Bearer")
        stream = httpx.post(
            f"{live_asgi}/api/v1/chat", json={"message": "你好"}, headers={"Authorization": f"Bearer {token}"}
        )
        assert stream.status_code == 401, name
        assert stream.json() == {"code": 40101, "message": "token_invalid"}, name
    # The control: the same construction with the right key and claims is accepted.
    session = _session(user)
    control = jwt.encode(_claims(user, session), settings.SECRET_KEY, algorithm="HS256")
    assert _get(live_asgi, "/api/v1/conversations", control).status_code == 200


ARABIC_INDIC = str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")


def _claim_cases(user, session) -> dict[str, dict]:
    """Signed with the right key, only one claim wrong: the claim rule alone must refuse it."""
    return {
        "sub_40_digits": {"sub": "1" * 40},  # overflowed the integer query: a 500
        "sub_19_digits": {"sub": "9" * 19},  # past the largest BigAutoField
        "sub_arabic_indic_digits": {"sub": str(user.pk).translate(ARABIC_INDIC)},  # int() read it as the user
        "sub_fullwidth_digits": {"sub": str(user.pk).translate(str.maketrans("0123456789", "０１２３４５６７８９"))},
        "sub_leading_zero": {"sub": f"0{user.pk}"},
        "sub_zero": {"sub": "0"},
        "sub_negative": {"sub": f"-{user.pk}"},
        "sub_spaces": {"sub": f" {user.pk} "},
        "sub_trailing_newline": {"sub": f"{user.pk}\n"},
        "sub_empty": {"sub": ""},
        "sub_number": {"sub": user.pk},
        "sub_list": {"sub": [str(user.pk)]},
        "sid_not_a_uuid": {"sid": "not-a-uuid"},
        "sid_braced_uuid": {"sid": "{" + str(session.id) + "}"},
        "sid_urn_uuid": {"sid": f"urn:uuid:{session.id}"},
        "sid_hex_without_dashes": {"sid": session.id.hex},
        "sid_number": {"sid": 12345},
        "sid_object": {"sid": {"id": str(session.id)}},
        "sid_huge": {"sid": "a" * 5000},
        "roles_string": {"roles": "staff"},
        "roles_of_numbers": {"roles": [1, 2]},
        "roles_object": {"roles": {"staff": True}},
        "roles_missing": {"roles": None},
        "iat_string": {"iat": "yesterday"},
        "exp_list": {"exp": [1]},
        "iss_list": {"iss": [settings.JWT_ISSUER]},
    }


def _hs256(claims: dict) -> str:
    """Signed by hand: PyJWT's encoder refuses some of the shapes a hostile issuer would send."""
    signing_input = f"{_b64({'alg': 'HS256', 'typ': 'JWT'})}.{_b64(claims)}"
    digest = hmac.new(settings.SECRET_KEY.encode(), signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{base64.urlsafe_b64encode(digest).rstrip(b'=').decode()}"


def test_malformed_claims_are_401_never_500_nor_accepted(live_asgi, user):
    session = _session(user)
    for name, override in _claim_cases(user, session).items():
        token = _hs256(_claims(user, session, **override))
        rest = _get(live_asgi, "/api/v1/conversations", token)
        assert rest.status_code == 401, (name, rest.status_code, rest.text[:200])
        assert rest.json() == {"code": 40101, "message": "token_invalid"}, name
        stream = httpx.post(
            f"{live_asgi}/api/v1/chat", json={"message": "你好"}, headers={"Authorization": f"Bearer {token}"}
        )
        assert stream.status_code == 401, (name, stream.status_code, stream.text[:200])
        assert stream.json() == {"code": 40101, "message": "token_invalid"}, name
    # The control: the canonical forms of the same claims are accepted (upper-case UUID hex too).
    for sid in (str(session.id), str(session.id).upper()):
        control = _hs256(_claims(user, session, sid=sid))
        assert _get(live_asgi, "/api/v1/conversations", control).status_code == 200, sid


def test_missing_token_answers_token_missing(live_asgi, db):
    rest = _get(live_asgi, "/api/v1/conversations")
    assert rest.status_code == 401
    assert rest.json() == {"code": 40101, "message": "token_missing"}
    stream = httpx.post(f"{live_asgi}/api/v1/chat", json={"message": "你好"})
    assert stream.status_code == 401
    assert stream.json() == {"code": 40101, "message": "token_missing"}


def test_non_bearer_authorization_is_invalid(live_asgi, user, password):
    basic = base64.b64encode(f"{user.username}:{password}".encode()).decode()
    response = httpx.get(f"{live_asgi}/api/v1/conversations", headers={"Authorization": f"Basic {basic}"})
    assert response.status_code == 401
    assert response.json()["message"] == "token_invalid"


def test_deleting_the_session_row_revokes_the_jwt(live_asgi, user, user_token):
    assert _get(live_asgi, "/api/v1/conversations", user_token).status_code == 200
    AuthSession.objects.filter(user=user).delete()  # what admin's delete does
    response = _get(live_asgi, "/api/v1/conversations", user_token)
    assert response.status_code == 401
    assert response.json()["message"] == "token_invalid"


def test_expired_session_row_revokes_even_an_unexpired_jwt(live_asgi, user, user_token):
    AuthSession.objects.filter(user=user).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert _get(live_asgi, "/api/v1/conversations", user_token).status_code == 401


def test_inactive_user_is_refused(live_asgi, user, user_token):
    get_user_model().objects.filter(pk=user.pk).update(is_active=False)
    assert _get(live_asgi, "/api/v1/conversations", user_token).status_code == 401


def _chat_status(base, token) -> int:
    return httpx.post(f"{base}/api/v1/chat", json={"message": "你好"}, headers={"Authorization": f"Bearer {token}"}).status_code


def test_password_change_revokes_every_jwt_issued_before_it(live_asgi, user, password):
    issued = [
        httpx.post(f"{live_asgi}/api/v1/auth/token", json={"username": user.username, "password": password}).json()
        for _ in range(2)
    ]
    tokens = [body["access_token"] for body in issued]
    assert all(_get(live_asgi, "/api/v1/conversations", t).status_code == 200 for t in tokens)
    user.first_name = "改了名字"  # saving other fields (or last_login) keeps the tokens
    user.save()
    assert _get(live_asgi, "/api/v1/conversations", tokens[0]).status_code == 200

    user.set_password("a-new-Pass-2024!")
    user.save()
    for token in tokens:
        rest = _get(live_asgi, "/api/v1/conversations", token)
        assert rest.status_code == 401 and rest.json() == {"code": 40101, "message": "token_invalid"}
        assert _chat_status(live_asgi, token) == 401
    fresh = httpx.post(f"{live_asgi}/api/v1/auth/token", json={"username": user.username, "password": "a-new-Pass-2024!"})
    assert _get(live_asgi, "/api/v1/conversations", fresh.json()["access_token"]).status_code == 200
    # Setting the same password again is a change too (a new salt): what was issued is revoked.
    user.set_password("a-new-Pass-2024!")
    user.save()
    assert _get(live_asgi, "/api/v1/conversations", fresh.json()["access_token"]).status_code == 401


def test_admin_password_change_revokes_the_users_jwts(live_asgi, staff_user, password, user, user_token):
    client = httpx.Client(base_url=live_asgi, timeout=10, follow_redirects=True)
    try:
        client.get("/admin/login/")
        client.post("/admin/login/?next=/admin/", data={
            "username": staff_user.username, "password": password, "csrfmiddlewaretoken": client.cookies["csrftoken"]})
        changed = client.post(f"/admin/auth/user/{user.pk}/password/", data={
            "password1": "Reset-by-staff-77", "password2": "Reset-by-staff-77", "usable_password": "true",
            "csrfmiddlewaretoken": client.cookies["csrftoken"]})
        assert changed.status_code == 200
    finally:
        client.close()
    user.refresh_from_db()
    assert user.check_password("Reset-by-staff-77")
    assert _get(live_asgi, "/api/v1/conversations", user_token).status_code == 401


def test_jwt_check_is_one_query_with_the_user(user, user_token, django_assert_num_queries):
    from chat_app.accounts.authentication import jwt_session_resolve

    with django_assert_num_queries(1):
        session = jwt_session_resolve(token=user_token)
        assert session.user.username == user.username  # selected with the session row


def test_logout_deletes_the_session_and_revokes_the_token(live_asgi, user, user_token):
    response = httpx.post(f"{live_asgi}/api/v1/auth/logout", headers={"Authorization": f"Bearer {user_token}"})
    assert response.status_code == 204
    assert not AuthSession.objects.filter(user=user).exists()
    assert _get(live_asgi, "/api/v1/conversations", user_token).status_code == 401
    again = httpx.post(f"{live_asgi}/api/v1/auth/logout", headers={"Authorization": f"Bearer {user_token}"})
    assert again.status_code == 401


def test_logout_needs_a_token(live_asgi, db):
    response = httpx.post(f"{live_asgi}/api/v1/auth/logout")
    assert response.status_code == 401
    assert response.json()["message"] == "token_missing"


# --- POST /api/v1/auth/sso ------------------------------------------------------------------
class CampusUserInfo(ServedApp):
    """The campus user-info endpoint: 200 profile for GOOD_CAMPUS_TOKEN, else 401. Records calls."""

    def __init__(self, *, profile: dict | None = None, status: int = 200):
        self.profile = profile or {"sub": "20239999", "name": "王同学", "roles": ["student"]}
        self.status = status
        self.authorizations: list[str] = []
        self._lock = threading.Lock()
        self.app = Starlette(routes=[Route("/userinfo", self._userinfo)])

    async def _userinfo(self, request: Request):
        auth = request.headers.get("authorization", "")
        with self._lock:
            self.authorizations.append(auth)
        if auth != f"Bearer {GOOD_CAMPUS_TOKEN}":
            return JSONResponse({"error": "invalid_token"}, status_code=401)
        if self.status != 200:
            return JSONResponse({"error": "down"}, status_code=self.status)
        return JSONResponse(self.profile)

    @property
    def url(self) -> str:
        return f"{self.root_url}/userinfo"


@pytest.fixture
def campus_sso(settings):
    with CampusUserInfo() as sso:
        settings.CAMPUS_SSO_USERINFO_URL = sso.url
        yield sso


def test_sso_creates_the_user_and_keeps_the_campus_token_server_side(live_asgi, campus_sso):
    response = httpx.post(f"{live_asgi}/api/v1/auth/sso", json={"campus_token": GOOD_CAMPUS_TOKEN})
    assert response.status_code == 200
    assert campus_sso.authorizations == [f"Bearer {GOOD_CAMPUS_TOKEN}"]
    token = response.json()["access_token"]
    assert GOOD_CAMPUS_TOKEN not in response.text
    payload = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    assert GOOD_CAMPUS_TOKEN not in json.dumps(payload)
    assert payload["roles"] == ["student"]
    user = get_user_model().objects.get(username="20239999")
    assert user.first_name == "王同学" and not user.has_usable_password() and not user.is_staff
    session = AuthSession.objects.get(id=payload["sid"])
    assert session.campus_token == GOOD_CAMPUS_TOKEN and session.via == "sso"
    assert _get(live_asgi, "/api/v1/conversations", token).status_code == 200


def test_sso_updates_the_linked_user_on_the_next_login(live_asgi, campus_sso):
    first = httpx.post(f"{live_asgi}/api/v1/auth/sso", json={"campus_token": GOOD_CAMPUS_TOKEN})
    assert first.status_code == 200
    campus_sso.profile = {"sub": "20239999", "name": "新名字", "roles": ["student", "monitor"]}
    response = httpx.post(f"{live_asgi}/api/v1/auth/sso", json={"campus_token": GOOD_CAMPUS_TOKEN})
    assert response.status_code == 200
    assert get_user_model().objects.get(username="20239999").first_name == "新名字"
    assert jwt_decode(token=response.json()["access_token"])["roles"] == ["student", "monitor"]
    assert jwt_decode(token=first.json()["access_token"])["sub"] == jwt_decode(token=response.json()["access_token"])["sub"]
    identity = CampusIdentity.objects.get(sub="20239999")
    assert identity.roles == ["student", "monitor"]
    assert get_user_model().objects.count() == 1


def test_sso_logins_apply_the_group_mapping_too(live_asgi, campus_sso):
    """/api/v1/auth/sso is a login like the page's: the OIDC group mapping reads its profile's claims."""
    from django.contrib.auth.models import Group

    from chat_app.models import GroupMapping

    monitors = Group.objects.create(name="班干部")
    GroupMapping.objects.create(source="oidc", attribute="roles", value="monitor", group=monitors)
    assert httpx.post(f"{live_asgi}/api/v1/auth/sso", json={"campus_token": GOOD_CAMPUS_TOKEN}).status_code == 200
    user = get_user_model().objects.get(username="20239999")
    assert not user.groups.exists()
    campus_sso.profile = {"sub": "20239999", "name": "王同学", "roles": ["student", "monitor"]}
    assert httpx.post(f"{live_asgi}/api/v1/auth/sso", json={"campus_token": GOOD_CAMPUS_TOKEN}).status_code == 200
    assert list(user.groups.values_list("name", flat=True)) == ["班干部"]


def test_sso_user_without_a_usable_password_keeps_its_jwts(live_asgi, campus_sso):
    first = httpx.post(f"{live_asgi}/api/v1/auth/sso", json={"campus_token": GOOD_CAMPUS_TOKEN}).json()["access_token"]
    campus_sso.profile = {"sub": "20239999", "name": "改名的同学", "roles": ["student"]}
    second = httpx.post(f"{live_asgi}/api/v1/auth/sso", json={"campus_token": GOOD_CAMPUS_TOKEN}).json()["access_token"]
    # The second login refreshed the user (name, roles) without touching its unusable password.
    assert get_user_model().objects.get(username="20239999").first_name == "改名的同学"
    for token in (first, second):
        assert _get(live_asgi, "/api/v1/conversations", token).status_code == 200


def test_sso_sub_equal_to_a_local_username_never_logs_in_as_that_account(live_asgi, campus_sso):
    admin = get_user_model().objects.create_superuser(username="admin", password="admin-pass-123")
    campus_sso.profile = {"sub": "admin", "name": "冒名者", "roles": ["staff"]}
    response = httpx.post(f"{live_asgi}/api/v1/auth/sso", json={"campus_token": GOOD_CAMPUS_TOKEN})
    assert response.status_code == 200
    user_id = int(jwt_decode(token=response.json()["access_token"])["sub"])
    assert user_id != admin.pk
    user = get_user_model().objects.get(pk=user_id)
    assert user.username != "admin" and not user.is_staff and not user.is_superuser
    assert not user.has_usable_password() and user.first_name == "冒名者"
    admin.refresh_from_db()
    assert admin.first_name == "" and admin.check_password("admin-pass-123")

    again = httpx.post(f"{live_asgi}/api/v1/auth/sso", json={"campus_token": GOOD_CAMPUS_TOKEN})
    assert int(jwt_decode(token=again.json()["access_token"])["sub"]) == user_id
    assert CampusIdentity.objects.get(sub="admin").user_id == user_id


def test_sso_rejected_token_is_401_without_echoing_it(live_asgi, campus_sso):
    response = httpx.post(f"{live_asgi}/api/v1/auth/sso", json={"campus_token": "campus-bad-token-0000000000"})
    assert response.status_code == 401
    assert response.json() == {"code": 40101, "message": "token_invalid"}
    assert "campus-bad-token" not in response.text
    assert not AuthSession.objects.exists()


def test_sso_upstream_failure_is_502(live_asgi, campus_sso):
    campus_sso.status = 500
    response = httpx.post(f"{live_asgi}/api/v1/auth/sso", json={"campus_token": GOOD_CAMPUS_TOKEN})
    assert response.status_code == 502
    assert response.json()["code"] == 50003


def test_sso_unreachable_is_502(live_asgi, settings, db):
    settings.CAMPUS_SSO_USERINFO_URL = "http://127.0.0.1:9/userinfo"  # discard port: refused
    response = httpx.post(f"{live_asgi}/api/v1/auth/sso", json={"campus_token": GOOD_CAMPUS_TOKEN})
    assert response.status_code == 502


def test_sso_without_url_is_503(live_asgi, settings, db):
    settings.CAMPUS_SSO_USERINFO_URL = ""
    response = httpx.post(f"{live_asgi}/api/v1/auth/sso", json={"campus_token": GOOD_CAMPUS_TOKEN})
    assert response.status_code == 503
    assert response.json() == {"code": 50003, "message": "未配置校园统一认证，暂不能用校园令牌登录。"}


# --- the page's Django session -----------------------------------------------------------------
def _session_client(base, user, password) -> httpx.Client:
    client = httpx.Client(base_url=base, timeout=10)
    client.get("/login/")
    client.post(
        "/login/",
        data={"username": user.username, "password": password, "csrfmiddlewaretoken": client.cookies.get("csrftoken", "")},
    )
    assert client.cookies.get("sessionid"), "login through the page did not give a session"
    return client


def test_session_rest_reads_work_without_csrf_but_posts_need_it(live_asgi, user, password):
    client = _session_client(live_asgi, user, password)
    try:
        assert client.get("/api/v1/conversations").status_code == 200
        refused = client.post("/api/v1/chat", json={"message": "你好"})
        assert refused.status_code == 403
        assert refused.json()["code"] == 40301
        forged = client.post("/api/v1/chat", json={"message": "你好"}, headers={"X-CSRFToken": "x" * 32})
        assert forged.status_code == 403
        deleted = client.delete("/api/v1/conversations/5f1c2d3e-0000-4000-8000-000000000000")
        assert deleted.status_code == 403  # DRF session auth enforces CSRF on unsafe methods too
        assert deleted.json()["code"] == 40301
    finally:
        client.close()


def test_admin_lists_sessions_without_the_campus_token_and_deleting_revokes(live_asgi, staff_user, password, user, token_for):
    token = token_for(user, campus_token="campus-secret-in-admin-0123456789")
    session = AuthSession.objects.get(user=user)
    client = httpx.Client(base_url=live_asgi, timeout=10, follow_redirects=True)
    try:
        client.get("/admin/login/")
        client.post("/admin/login/?next=/admin/", data={
            "username": staff_user.username, "password": password, "csrfmiddlewaretoken": client.cookies["csrftoken"]})
        page = client.get(f"/admin/chat_app/authsession/{session.id}/change/")
        assert page.status_code == 200 and str(session.id) in page.text
        assert "campus-secret-in-admin" not in page.text
        client.post(f"/admin/chat_app/authsession/{session.id}/delete/",
                    data={"post": "yes", "csrfmiddlewaretoken": client.cookies["csrftoken"]})
    finally:
        client.close()
    assert not AuthSession.objects.filter(id=session.id).exists()
    assert _get(live_asgi, "/api/v1/conversations", token).status_code == 401
