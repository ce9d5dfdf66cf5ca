"""CAS login (统一身份认证, docs/design.md#campus-identity-and-audit) through the real project on
uvicorn and a real CAS server on loopback (django-cas-server in its own process, testkit/cas/):
real redirects, the CAS server's own login form, tickets validated at it; the hostile cases are
the attacks themselves (a replayed, forged, other-service or other-server ticket, an open
redirect, a forged single logout)."""

import secrets
import socket
import time
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from django.contrib.auth import get_user_model

from audit_app.models import AuditEvent
from chat_app.gateways.page.views import MSG_CAMPUS_LOGIN_FAILED
from chat_app.models import CampusIdentity
from testkit.cas.server import ACCOUNT, PASSWORD, CasServer

pytestmark = pytest.mark.django_db(transaction=True)
LOGIN = "/accounts/cas/login/"


@pytest.fixture
def site(live_asgi):
    """The student's browser: one cookie jar for the gateway and the CAS server (their cookies
    have different names; cookies ignore ports)."""
    with httpx.Client(base_url=live_asgi, timeout=15) as client:
        yield client


def _service(site) -> str:
    return str(site.base_url).rstrip("/") + LOGIN


def _cas_login(site, cas, *, next_url: str = "/") -> httpx.Response:
    """/accounts/cas/login/ → the CAS server's form → back with a ticket; the gateway's answer."""
    start = site.get(LOGIN, params={"next": next_url})
    assert start.status_code == 302
    service = parse_qs(urlsplit(start.headers["location"]).query)["service"][0]
    return site.get(cas.sign_in(site, service=service))


def _present(client, ticket: str) -> httpx.Response:
    """A ticket brought to the gateway by a browser that started a CAS login there."""
    client.get(LOGIN)
    return client.get(LOGIN, params={"ticket": ticket})


def _refused(response: httpx.Response) -> bool:
    return response.status_code == 400 and MSG_CAMPUS_LOGIN_FAILED in response.text


def test_off_without_cas_server_url(site):
    assert site.get(LOGIN).status_code == 404
    assert 'id="cas-login"' not in site.get("/login/").text


def test_login_maps_the_attributes_and_lands_on_next(site, cas_settings):
    cas = cas_settings
    page = site.get("/login/")
    assert 'id="cas-login"' in page.text and "统一身份认证" in page.text

    start = site.get(LOGIN, params={"next": "/c/7c1b3a2e-0000-4000-8000-000000000000/"})
    assert start.headers["location"].startswith(f"{cas.cas_url}login?")
    assert parse_qs(urlsplit(start.headers["location"]).query)["service"] == [_service(site)]
    back = site.get(cas.sign_in(site, service=_service(site)))
    assert back.status_code == 302 and back.headers["location"] == "/c/7c1b3a2e-0000-4000-8000-000000000000/"

    identity = CampusIdentity.objects.select_related("user").get(source="cas", sub=ACCOUNT)
    assert identity.user.username == ACCOUNT and identity.user.first_name == "林同学"
    assert (identity.college, identity.identity_type) == ("计算机学院", "本科生")
    assert identity.attributes["mail"] == ["2023010001@example.edu.cn"]
    assert not identity.user.has_usable_password()
    assert site.get("/").status_code == 200  # signed in


def test_cas_version_2_and_a_mapped_number_attribute(site, cas_settings, settings):
    """CAS 2.0's /serviceValidate; the student number taken from an attribute, not the CAS user."""
    settings.CAS_VERSION = "2"
    settings.CAS_ATTRIBUTE_MAP = {**settings.CAS_ATTRIBUTE_MAP, "number": "studentNo"}
    cas_settings.attributes_set(studentNo="S2023010001")
    assert _cas_login(site, cas_settings).status_code == 302
    assert CampusIdentity.objects.get(source="cas").sub == "S2023010001"


def test_a_cas_user_named_like_a_local_account_gets_a_user_of_its_own(site, cas_settings, django_user_model):
    admin = django_user_model.objects.create_superuser("admin", password="local-admin-password")
    cas_settings.accounts_set({"admin": {"password": PASSWORD, "attributes": {"cn": "冒名者"}}})
    start = site.get(LOGIN)
    service = parse_qs(urlsplit(start.headers["location"]).query)["service"][0]
    assert site.get(cas_settings.sign_in(site, service=service, username="admin")).status_code == 302
    identity = CampusIdentity.objects.select_related("user").get(source="cas", sub="admin")
    assert identity.user != admin and identity.user.username == "admin-2"
    assert not identity.user.is_staff and not identity.user.is_superuser


def test_a_replayed_ticket_is_refused(site, cas_settings, live_asgi):
    site.get(LOGIN)
    back_with_ticket = cas_settings.sign_in(site, service=_service(site))
    assert site.get(back_with_ticket).status_code == 302
    with httpx.Client(base_url=live_asgi, timeout=15) as attacker:  # the URL leaked: a log, a Referer
        attacker.get(LOGIN)  # the attacker starts a login of their own first
        replay = attacker.get(back_with_ticket)
        assert _refused(replay)
        assert attacker.get("/").status_code == 302  # not signed in


def test_a_forged_ticket_is_refused(site, cas_settings):
    assert _refused(_present(site, f"ST-{secrets.token_urlsafe(48)}"))
    assert _refused(_present(site, "ST-\n<x/>"))  # not even sent to the CAS server
    assert _refused(_present(site, "ST-" + "a" * 300))
    assert not CampusIdentity.objects.exists()


def test_a_ticket_issued_for_another_service_is_refused(site, cas_settings):
    """A ticket the CAS server gave another campus application (same server, same student)."""
    other_service = str(site.base_url).rstrip("/") + "/other-app/"
    ticket = parse_qs(urlsplit(cas_settings.sign_in(site, service=other_service)).query)["ticket"][0]
    assert _refused(_present(site, ticket))
    assert not CampusIdentity.objects.exists()


def test_a_ticket_from_an_untrusted_cas_server_is_refused(site, cas_settings, tmp_path):
    """An attacker's own CAS server, where they are `2023010001`, issues a real ticket for our
    service: it is validated at CAS_SERVER_URL, which never issued it."""
    rogue = CasServer(tmp_path).start()
    try:
        ticket = parse_qs(urlsplit(rogue.sign_in(httpx.Client(timeout=15), service=_service(site))).query)["ticket"][0]
        assert _refused(_present(site, ticket))
    finally:
        rogue.stop()
    assert not CampusIdentity.objects.exists()


def test_a_ticket_in_a_session_that_started_no_login_is_refused(site, cas_settings, live_asgi):
    """Login CSRF: the attacker signs in at the CAS server as themselves, stops before the ticket
    is used and sends the victim the link; the victim's browser never started a CAS login here."""
    attacker = httpx.Client(timeout=15)
    ticket_link = cas_settings.sign_in(attacker, service=_service(site))
    victim = site
    answer = victim.get(ticket_link)
    assert _refused(answer)
    assert victim.get("/").status_code == 302  # not signed in as anyone
    assert not CampusIdentity.objects.exists()


@pytest.mark.parametrize(
    "next_url", ["https://evil.example/", "//evil.example/x", "/\\evil.example", "javascript:alert(1)"]
)
def test_next_never_leaves_the_site(site, cas_settings, next_url):
    back = _cas_login(site, cas_settings, next_url=next_url)
    assert back.status_code == 302 and back.headers["location"] == "/"


@pytest.mark.parametrize("version", ["2", "3"])
def test_single_logout_from_the_cas_server_ends_the_session(site, cas_settings, settings, version):
    """With CAS 2 as well: django-cas-ng's own handler reads a logoutRequest with CAS 3 clients only."""
    settings.CAS_VERSION = version
    assert _cas_login(site, cas_settings).status_code == 302
    assert site.get("/").status_code == 200
    # The student signs out at the CAS server (another tab): it POSTs its logoutRequest to us.
    assert cas_settings.sign_out(site).status_code == 200
    assert site.get("/").status_code == 302  # back to the login page
    signed_out = AuditEvent.objects.get(event=AuditEvent.Event.SIGN_OUT)  # audited as any sign-out
    assert (signed_out.target, signed_out.details["via"]) == ("cas", "cas_single_logout")


def test_a_forged_logout_request_ends_nothing(site, cas_settings, live_asgi):
    assert _cas_login(site, cas_settings).status_code == 302
    forged = (
        '<samlp:LogoutRequest xmlns:samlp="urn:oasis:names:tc:SAML:2.0:protocol" ID="x" Version="2.0">'
        f"<samlp:SessionIndex>ST-{secrets.token_urlsafe(48)}</samlp:SessionIndex></samlp:LogoutRequest>"
    )
    answer = httpx.post(f"{live_asgi}{LOGIN}", data={"logoutRequest": forged}, timeout=10)
    assert answer.status_code == 200
    xxe = (
        '<?xml version="1.0"?><!DOCTYPE r [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
        '<samlp:LogoutRequest xmlns:samlp="urn:oasis:names:tc:SAML:2.0:protocol">'
        "<samlp:SessionIndex>&x;</samlp:SessionIndex></samlp:LogoutRequest>"
    )
    assert httpx.post(f"{live_asgi}{LOGIN}", data={"logoutRequest": xxe}, timeout=10).status_code == 200
    assert httpx.post(f"{live_asgi}{LOGIN}", data={"logoutRequest": "<not xml"}, timeout=10).status_code == 200
    assert httpx.post(f"{live_asgi}{LOGIN}", data={}, timeout=10).status_code == 400
    assert site.get("/").status_code == 200  # still signed in


def test_logout_ends_the_campus_sign_on_too(site, cas_settings):
    assert _cas_login(site, cas_settings).status_code == 302
    site.get("/")
    out = site.post("/accounts/cas/logout/", headers={"X-CSRFToken": site.cookies["csrftoken"]})
    assert out.status_code == 302
    assert out.headers["location"].startswith(f"{cas_settings.cas_url}logout?service=")
    assert site.get("/").status_code == 302
    site.get(out.headers["location"])  # the browser follows on to the CAS server's logout
    # The CAS sign-on ended as well: the next CAS login asks for the password again.
    start = site.get(LOGIN)
    at_cas = site.get(start.headers["location"])
    assert at_cas.status_code == 200 and 'name="password"' in at_cas.text


def test_service_url_behind_a_reverse_proxy(site, cas_settings, settings):
    """nginx passes Host and X-Forwarded-Proto (docs/operations.md#cas-behind-nginx): the service
    URL is the public https one, and X-Forwarded-Host, which settings do not trust, changes nothing."""
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "xiaozhi.example.edu.cn"]
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    proxied = {"Host": "xiaozhi.example.edu.cn", "X-Forwarded-Proto": "https", "X-Forwarded-Host": "evil.example"}
    start = site.get(LOGIN, headers=proxied)
    service = parse_qs(urlsplit(start.headers["location"]).query)["service"][0]
    assert service == "https://xiaozhi.example.edu.cn/accounts/cas/login/"
    back = site.get(
        cas_settings.sign_in(site, service=service).replace("https://xiaozhi.example.edu.cn", ""), headers=proxied
    )
    assert back.status_code == 302 and back.headers["location"] == "/"
    assert CampusIdentity.objects.filter(source="cas", sub=ACCOUNT).exists()


def test_cas_root_proxied_as_fixes_the_service_url(site, cas_settings, settings):
    settings.CAS_ROOT_PROXIED_AS = "https://xiaozhi.example.edu.cn"
    start = site.get(LOGIN)
    assert parse_qs(urlsplit(start.headers["location"]).query)["service"] == [
        "https://xiaozhi.example.edu.cn/accounts/cas/login/"
    ]


def test_a_disabled_account_is_refused(site, cas_settings):
    assert _cas_login(site, cas_settings).status_code == 302
    get_user_model().objects.filter(username=ACCOUNT).update(is_active=False)
    site.cookies.clear()
    answer = _cas_login(site, cas_settings)
    assert answer.status_code == 403


def test_the_button_in_english(site, cas_settings):
    page = site.get("/login/", headers={"Accept-Language": "en"})
    assert ">Campus sign-in (CAS)</a>" in page.text


def test_a_cas_server_down_or_hanging_fails_the_login_in_time(site, cas_settings, settings):
    """python-cas asks with no timeout of its own: a CAS server that accepts and never answers
    must not hold the worker (CAS_TIMEOUT)."""
    settings.CAS_SERVER_URL = "http://127.0.0.1:1/cas/"  # nothing listens
    assert _refused(_present(site, "ST-1-abcdefghijklmnopqrstuvwxyz0123456789"))

    hanging = socket.create_server(("127.0.0.1", 0))  # connections queue, nobody ever reads them
    try:
        settings.CAS_SERVER_URL = f"http://127.0.0.1:{hanging.getsockname()[1]}/cas/"
        settings.CAS_TIMEOUT = 0.5
        site.get(LOGIN)
        started = time.monotonic()
        assert _refused(site.get(LOGIN, params={"ticket": "ST-1-abcdefghijklmnopqrstuvwxyz0123456789"}))
        assert time.monotonic() - started < 5
    finally:
        hanging.close()


@pytest.mark.parametrize("number", ["", "2023\n0001", "x" * 151])
def test_an_unusable_student_number_is_refused_with_the_reason(site, cas_settings, settings, number):
    """The number names a user shown in admin and logs: missing, a control character or too long
    is refused, and the student is told whom to ask."""
    settings.CAS_ATTRIBUTE_MAP = {**settings.CAS_ATTRIBUTE_MAP, "number": "studentNo"}
    cas_settings.attributes_set(studentNo=number)
    answer = _cas_login(site, cas_settings)
    assert answer.status_code == 400 and "没有给出可用的学号 / 工号" in answer.text
    assert not CampusIdentity.objects.exists()
