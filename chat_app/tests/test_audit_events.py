"""Every event chat_app serves writes its audit row (docs/design.md#campus-identity-and-audit): sign-in
accepted or refused on each way in (page, admin, JWT endpoint, SSO, OIDC), sign-out, API keys
made and revoked, the student's data exported and deleted, a decision on a wait."""

import httpx
import pytest
from django.urls import reverse

from audit_app.chain import audit_verify
from audit_app.models import AuditEvent
from chat_app.models import ApiKey
from chat_app.tests.accounts.test_auth_api import GOOD_CAMPUS_TOKEN, campus_sso  # noqa: F401 - a fixture
from chat_app.tests.accounts.test_campus_login import _campus_login
from testkit.web.sse import read_until


def _rows(**filters) -> list[tuple]:
    rows = AuditEvent.objects.filter(**filters).order_by("id")
    return [(r.event, r.outcome, r.actor_username, r.details.get("via"), r.details.get("reason")) for r in rows]


def _intact() -> None:
    assert audit_verify()[1] == []


# --- sign-in, sign-out ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_page_sign_in_accepted_and_refused_and_sign_out(client, user, password):
    client.post("/login/", {"username": user.username, "password": "wrong"}, REMOTE_ADDR="10.1.2.3")
    client.post("/login/", {"username": user.username, "password": password}, REMOTE_ADDR="10.1.2.3")
    client.post("/logout/")

    assert _rows() == [
        ("sign_in", "refused", user.username, "password", "credentials"),
        ("sign_in", "ok", user.username, "password", None),
        ("sign_out", "ok", user.username, None, None),
    ]
    assert AuditEvent.objects.order_by("id").first().source == "10.1.2.3"
    _intact()


@pytest.mark.django_db
def test_a_throttled_sign_in_is_refused_on_the_record_once_per_address_and_window(client, user, password, settings):
    settings.LOGIN_MAX_FAILURES_PER_USERNAME = 1
    client.post("/login/", {"username": user.username, "password": "wrong"})
    for _ in range(5):  # a bot keeps trying the locked account
        client.post("/login/", {"username": user.username, "password": password})
    client.post("/api/v1/auth/token", {"username": user.username, "password": password},
                content_type="application/json")

    assert [row[4] for row in _rows()] == ["credentials", "throttled"]


@pytest.mark.django_db
def test_an_admin_sign_in_of_a_superuser_is_marked_and_a_student_at_the_admin_is_refused(
    client, staff_user, user, password
):
    client.post("/admin/login/", {"username": user.username, "password": password})  # right password, not staff
    client.post("/admin/login/", {"username": staff_user.username, "password": password})

    assert _rows() == [
        ("sign_in", "refused", user.username, "admin", "not_allowed"),
        ("sign_in", "ok", staff_user.username, "admin", None),
    ]
    assert AuditEvent.objects.order_by("id").last().details == {"via": "admin", "superuser": True}


@pytest.mark.django_db
def test_the_jwt_endpoint_signs_in_refuses_and_signs_out(client, user, password):
    token = "/api/v1/auth/token"
    client.post(token, {"username": user.username, "password": "wrong"}, content_type="application/json")
    issued = client.post(token, {"username": user.username, "password": password}, content_type="application/json")
    client.post("/api/v1/auth/logout", HTTP_AUTHORIZATION=f"Bearer {issued.json()['access_token']}")

    assert _rows() == [
        ("sign_in", "refused", user.username, "password_api", "credentials"),
        ("sign_in", "ok", user.username, "password_api", None),
        ("sign_out", "ok", user.username, None, None),
    ]


@pytest.mark.django_db(transaction=True)
def test_sso_signs_in_and_a_rejected_campus_token_is_refused(live_asgi, campus_sso):  # noqa: F811
    httpx.post(f"{live_asgi}/api/v1/auth/sso", json={"campus_token": "campus-bad-token-0000000000"})
    httpx.post(f"{live_asgi}/api/v1/auth/sso", json={"campus_token": GOOD_CAMPUS_TOKEN})

    assert _rows() == [
        ("sign_in", "refused", "", "sso_api", "campus_token"),
        ("sign_in", "ok", campus_sso.profile["sub"], "sso_api", None),
    ]
    _intact()


@pytest.mark.django_db(transaction=True)
def test_oidc_signs_in_and_a_forged_state_is_refused(live_asgi, oidc_settings):
    with httpx.Client(base_url=live_asgi, timeout=10) as site:
        site.get("/login/campus/callback/", params={"code": "forged", "state": "forged"})
        assert _campus_login(site).status_code == 302

    rows = _rows()
    assert rows[0] == ("sign_in", "refused", "", "oidc", "login_failed")
    assert rows[1][:2] == ("sign_in", "ok") and rows[1][3] == "oidc"


# --- API keys -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_api_key_made_and_revoked_by_its_owner_and_by_staff(client, user, staff_user):
    client.force_login(user)
    made = client.post("/api/v1/api-keys", {"name": "Cherry"}, content_type="application/json").json()
    client.delete(f"/api/v1/api-keys/{made['id']}")
    other = client.post("/api/v1/api-keys", {"name": "Other"}, content_type="application/json").json()
    client.force_login(staff_user)
    client.post(reverse("admin:chat_app_apikey_changelist"), {"action": "revoke", "_selected_action": [other["id"]]})

    keys = _rows(event__startswith="api_key")
    assert [row[:3] for row in keys] == [
        ("api_key_created", "ok", user.username),
        ("api_key_revoked", "ok", user.username),
        ("api_key_created", "ok", user.username),
        ("api_key_revoked", "ok", staff_user.username),
    ]
    revoked_by_staff = AuditEvent.objects.filter(event="api_key_revoked").order_by("id").last()
    assert revoked_by_staff.details["owner"] == user.username and revoked_by_staff.details["key_id"] == other["id"]
    assert ApiKey.objects.filter(revoked_at__isnull=True).count() == 0
    _intact()


@pytest.mark.django_db
def test_using_an_api_key_is_not_a_sign_in(client, user):
    client.force_login(user)
    secret = client.post("/api/v1/api-keys", {"name": "Cherry"}, content_type="application/json").json()["key"]
    client.logout()
    before = AuditEvent.objects.count()

    assert client.get("/api/v1/agents", HTTP_AUTHORIZATION=f"Bearer {secret}").status_code == 200

    assert AuditEvent.objects.count() == before


# --- the student's data -------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_students_data_export_and_deletion_are_audited(client, user):
    client.force_login(user)
    assert client.get("/api/v1/me/export").status_code == 200
    assert client.delete("/api/v1/me/conversations").status_code == 200

    assert [row[:3] for row in _rows(event__startswith="data_")] == [
        ("data_export", "ok", user.username),
        ("data_deletion", "ok", user.username),
    ]


# --- a decision on a wait -----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_an_approval_decision_is_audited(live_asgi, llm_settings, agent, sub_agent, auth_headers, user):
    sub_agent.approval_policy = "ask"
    sub_agent.save()
    llm_settings.reply_tool_calls(("call_canteen", {"message": "订午饭"}))
    llm_settings.reply_text("好的，不订。")
    with httpx.Client(base_url=live_asgi, timeout=15) as client:
        with client.stream("POST", "/api/v1/chat", json={"message": "订午饭"}, headers=auth_headers) as response:
            blocks, _ = read_until(response, lambda f: f["type"] == "approval_required")
            run_id, call_id = blocks[0][1]["run_id"], blocks[-1][1]["call_id"]
            decided = client.post(
                f"/api/v1/runs/{run_id}/approvals",
                json={"call_id": call_id, "decision": "reject"},
                headers=auth_headers,
            )
            assert decided.status_code == 200

    (row,) = AuditEvent.objects.filter(event="approval_decision")
    assert (row.actor_username, row.outcome, row.target) == (user.username, "ok", f"run:{run_id} call:{call_id}")
    assert row.details == {"decision": "rejected", "tool": "call_canteen", "kind": "approval", "authorized": False}
