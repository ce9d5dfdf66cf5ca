"""The role-limited admin in Chromium: an auditor signs in at /admin/login/, sees only the audit
log (their own sign-in in it); a security admin's admin has no audit log."""

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from audit_app.models import AuditEvent
from audit_app.roles import AUDITOR, SECURITY_ADMIN, roles_apply
from testkit.fixtures.browser import ARTIFACTS

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _staff(role: str, password: str):
    roles_apply()  # a transactional test's flush took the migration's groups
    person = get_user_model().objects.create_user(username=f"staff-{role}", password=password, is_staff=True)
    person.groups.add(Group.objects.get(name=role))
    return person


def _admin_login(browser_page, user, password) -> None:
    page = browser_page.page
    browser_page.goto("/admin/login/")
    page.fill("#id_username", user.username)
    page.fill("#id_password", password)
    page.click("input[type=submit]")
    page.wait_for_selector("#content-main")


def test_the_auditor_sees_only_the_audit_log_with_their_own_sign_in(browser_page, password):
    auditor = _staff(AUDITOR, password)
    _admin_login(browser_page, auditor, password)
    page = browser_page.page

    modules = page.locator("#content-main .module caption").all_text_contents()
    assert [text.strip() for text in modules] == ["审计"]
    page.click("#content-main a:text('审计日志')")
    page.wait_for_selector("#result_list")
    assert "登录" in page.text_content("#result_list") and auditor.username in page.text_content("#result_list")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "audit-log-auditor.png"))

    row = AuditEvent.objects.get(event="sign_in", actor_username=auditor.username)
    assert row.details == {"via": "admin"} and row.outcome == "ok"


def test_the_security_admin_has_no_audit_log(browser_page, password):
    security = _staff(SECURITY_ADMIN, password)
    _admin_login(browser_page, security, password)
    page = browser_page.page

    assert "审计日志" not in page.text_content("#content-main")  # its 403 by address: test_roles.py
    assert "用户" in page.text_content("#content-main")
