"""Login throttling (services/login_throttle.py) through the real ASGI app and the real cache.

The test server is uvicorn, which, like production behind nginx, takes the client address from
`X-Forwarded-For` when the connection comes from 127.0.0.1: each test picks its clients' addresses
with that header. Limits are the defaults unless a test says otherwise: 5 failures per username,
20 per address, in 15 minutes.
"""
import time

import httpx
import pytest
from django.contrib.auth import get_user_model

from chat_app.accounts.throttle import client_ip_bucket
from chat_app.models import AuthSession
from chat_app.tests.accounts.test_auth_api import GOOD_CAMPUS_TOKEN, CampusUserInfo

pytestmark = pytest.mark.django_db(transaction=True)

THROTTLED = "登录失败次数过多，请 15 分钟后再试。"


def _token(base, username, password, *, ip="10.0.0.1") -> httpx.Response:
    return httpx.post(
        f"{base}/api/v1/auth/token",
        json={"username": username, "password": password},
        headers={"X-Forwarded-For": ip},
        timeout=10,
    )


def _sso(base, campus_token, *, ip="10.0.0.1") -> httpx.Response:
    return httpx.post(
        f"{base}/api/v1/auth/sso", json={"campus_token": campus_token}, headers={"X-Forwarded-For": ip}, timeout=10
    )


def _assert_throttled(response: httpx.Response, message: str = THROTTLED) -> int:
    assert response.status_code == 429, response.text[:200]
    assert response.json() == {"code": 42903, "message": message}
    retry_after = int(response.headers["Retry-After"])
    assert 0 < retry_after <= 900
    return retry_after


# --- per username ------------------------------------------------------------------------------
def test_username_locks_after_five_failures_from_any_address(live_asgi, user, password):
    for n in range(5):  # a distributed guesser: each attempt from another address
        assert _token(live_asgi, user.username, f"guess-{n}", ip=f"10.1.0.{n}").status_code == 401
    refused = _token(live_asgi, user.username, password, ip="10.1.0.99")  # even the right password
    first_wait = _assert_throttled(refused)
    assert not AuthSession.objects.exists()
    # Refused attempts are not counted and do not push the end of the lock further away.
    second_wait = _assert_throttled(_token(live_asgi, user.username, "another-guess", ip="10.1.0.100"))
    assert second_wait <= first_wait
    # Other users, from the same addresses, are not affected; the username's case is no way around.
    other = get_user_model().objects.create_user(username="20230002", password=password)
    assert _token(live_asgi, other.username, password, ip="10.1.0.0").status_code == 200
    _assert_throttled(_token(live_asgi, f" {user.username.upper()} ", password, ip="10.1.0.1"))


def test_success_starts_the_username_over(live_asgi, user, password):
    for n in range(4):
        assert _token(live_asgi, user.username, f"typo-{n}").status_code == 401
    assert _token(live_asgi, user.username, password).status_code == 200
    for n in range(5):  # a clean slate: five more failures before the lock
        assert _token(live_asgi, user.username, f"typo-again-{n}").status_code == 401
    _assert_throttled(_token(live_asgi, user.username, password))


def test_the_lock_ends_with_its_window(live_asgi, user, password, settings):
    settings.LOGIN_FAILURE_WINDOW_SEC = 1
    for n in range(5):
        assert _token(live_asgi, user.username, f"guess-{n}").status_code == 401
    refused = _token(live_asgi, user.username, password)
    assert refused.status_code == 429 and refused.headers["Retry-After"] == "1"
    assert refused.json()["message"] == "登录失败次数过多，请 1 分钟后再试。"
    deadline = time.monotonic() + 5
    while (status := _token(live_asgi, user.username, password).status_code) == 429:
        assert time.monotonic() < deadline, "the lock outlived its window"
        time.sleep(0.1)  # polling the server for the window's end, not waiting for a side task
    assert status == 200


# --- per address -------------------------------------------------------------------------------
def test_address_locks_after_twenty_failures_across_usernames(live_asgi, user, password):
    for n in range(20):
        assert _token(live_asgi, f"2023{n:04d}x", "guess", ip="10.2.0.7").status_code == 401
    _assert_throttled(_token(live_asgi, user.username, password, ip="10.2.0.7"))
    assert _token(live_asgi, user.username, password, ip="10.2.0.8").status_code == 200


def test_successes_never_count_nor_reset_the_address(live_asgi, user, password):
    # A campus NAT: many students log in from one address, and that alone locks nobody out.
    for _ in range(25):
        assert _token(live_asgi, user.username, password, ip="10.3.0.1").status_code == 200
    # An attacker holding one valid account cannot wipe the address's failures by logging in.
    for n in range(19):
        assert _token(live_asgi, f"victim{n}", "guess", ip="10.3.0.1").status_code == 401
    assert _token(live_asgi, user.username, password, ip="10.3.0.1").status_code == 200
    assert _token(live_asgi, "victim19", "guess", ip="10.3.0.1").status_code == 401
    _assert_throttled(_token(live_asgi, user.username, password, ip="10.3.0.1"))


def test_ipv6_clients_count_per_64_block():
    assert client_ip_bucket("2001:db8:1:2:aaaa::1") == client_ip_bucket("2001:db8:1:2:bbbb::9") == "2001:db8:1:2::/64"
    assert client_ip_bucket("2001:db8:1:3::1") != client_ip_bucket("2001:db8:1:2::1")
    assert client_ip_bucket("::ffff:10.0.0.1") == client_ip_bucket("10.0.0.1") == "10.0.0.1"
    assert client_ip_bucket("") == "unknown"


# --- campus SSO ----------------------------------------------------------------------------------
def test_rejected_campus_tokens_lock_the_address(live_asgi, settings, db):
    with CampusUserInfo() as sso:
        settings.CAMPUS_SSO_USERINFO_URL = sso.url
        for n in range(20):
            assert _sso(live_asgi, f"guessed-campus-token-{n:04d}", ip="10.4.0.1").status_code == 401
        _assert_throttled(_sso(live_asgi, GOOD_CAMPUS_TOKEN, ip="10.4.0.1"))
        assert len(sso.authorizations) == 20  # the refused attempt never reached the campus SSO
        assert _sso(live_asgi, GOOD_CAMPUS_TOKEN, ip="10.4.0.2").status_code == 200


def test_campus_sso_outage_is_not_counted(live_asgi, settings, db):
    settings.CAMPUS_SSO_USERINFO_URL = "http://127.0.0.1:9/userinfo"  # refused: 502, no verdict on the token
    for _ in range(22):
        assert _sso(live_asgi, GOOD_CAMPUS_TOKEN, ip="10.5.0.1").status_code == 502


# --- the HTML login forms share the counters -------------------------------------------------------
def _form_post(client: httpx.Client, path: str, username: str, password: str, ip: str) -> httpx.Response:
    client.get(path, headers={"X-Forwarded-For": ip})
    return client.post(
        path,
        data={"username": username, "password": password, "csrfmiddlewaretoken": client.cookies["csrftoken"]},
        headers={"X-Forwarded-For": ip},
    )


def test_page_login_locks_with_a_chinese_error_and_429(live_asgi, user, password):
    with httpx.Client(base_url=live_asgi, timeout=10) as client:
        for n in range(3):
            failed = _form_post(client, "/login/", user.username, f"guess-{n}", ip="10.6.0.1")
            assert failed.status_code == 200 and "学号或密码不正确" in failed.text
        for n in range(2):  # the API counts against the same username
            assert _token(live_asgi, user.username, f"api-guess-{n}", ip="10.6.0.2").status_code == 401
        refused = _form_post(client, "/login/", user.username, password, ip="10.6.0.3")
        assert refused.status_code == 429 and 0 < int(refused.headers["Retry-After"]) <= 900
        assert THROTTLED in refused.text and "学号或密码不正确" not in refused.text
        assert not client.cookies.get("sessionid")
    _assert_throttled(_token(live_asgi, user.username, password, ip="10.6.0.4"))


def test_admin_login_locks_with_a_chinese_error(live_asgi, staff_user, password):
    with httpx.Client(base_url=live_asgi, timeout=10) as client:
        for n in range(5):
            assert _form_post(client, "/admin/login/", staff_user.username, f"guess-{n}", ip="10.7.0.1").status_code == 200
        refused = _form_post(client, "/admin/login/", staff_user.username, password, ip="10.7.0.1")
        assert refused.status_code == 200 and THROTTLED in refused.text
        assert not client.cookies.get("sessionid")
        assert client.get("/admin/", follow_redirects=False).status_code == 302  # still logged out


def test_right_password_on_the_admin_form_of_a_student_is_not_a_failure(live_asgi, user, password):
    # The admin refuses non-staff, but the password was right: nothing for a guesser to learn.
    with httpx.Client(base_url=live_asgi, timeout=10) as client:
        for _ in range(6):
            assert _form_post(client, "/admin/login/", user.username, password, ip="10.8.0.1").status_code == 200
    assert _token(live_asgi, user.username, password, ip="10.8.0.1").status_code == 200
