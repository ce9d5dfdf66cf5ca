"""Reports of answers in admin (内容安全 → 举报, docs/safety.md#reports-举报): the 安全管理员 lists,
filters and searches them, reads what was reported as it was filed, and sets the status and the
outcome; whoever changes the status is recorded as its handler, and each move is audited."""

import uuid

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.urls import reverse

from audit_app.chain import audit_verify
from audit_app.models import AuditEvent
from audit_app.roles import SECURITY_ADMIN, SYSTEM_ADMIN, roles_apply
from safety_app.models import AnswerReport
from testkit.web.admin_forms import admin_form_data

pytestmark = pytest.mark.django_db

LIST = reverse("admin:safety_app_answerreport_changelist")


@pytest.fixture
def member(client, password):
    """`member(role)` → (the test client signed in as staff holding only `role`, that person)."""
    roles_apply()  # a transactional test's flush before this one takes the migration's groups

    def make(role: str):
        person = get_user_model().objects.create_user(username=f"staff-{role}", password=password, is_staff=True)
        person.groups.add(Group.objects.get(name=role))
        client.force_login(person)
        return client, person

    return make


@pytest.fixture
def reports(user, password):
    other_user = get_user_model().objects.create_user(username="20230002", password=password)

    def report(reporter, answer, reason, **fields):
        return AnswerReport.objects.create(
            reporter=reporter, message_id=uuid.uuid4(), conversation_id=uuid.uuid4(), question="一食堂吃什么",
            answer=answer, reason=reason, **fields
        )

    return [
        report(user, "红烧肉 12 元", "false", detail="今天是 15 元"),
        report(other_user, "可以翻墙去看", "illegal", status="handling"),
    ]


def _listing(client, **params) -> str:
    response = client.get(LIST, params)
    assert response.status_code == 200
    return response.content.decode()


def test_the_security_admin_lists_filters_and_searches_reports(member, reports):
    client, _ = member(SECURITY_ADMIN)

    page = _listing(client)
    assert "红烧肉 12 元" in page and "可以翻墙去看" in page and "虚假或错误信息" in page
    pending = _listing(client, status="pending")
    assert "红烧肉 12 元" in pending and "可以翻墙去看" not in pending
    illegal = _listing(client, reason="illegal")
    assert "可以翻墙去看" in illegal and "红烧肉 12 元" not in illegal
    assert "可以翻墙去看" not in _listing(client, q="15 元")  # the student's detail is searched
    assert "红烧肉 12 元" in _listing(client, q="15 元")
    assert client.get(reverse("admin:safety_app_answerreport_add")).status_code == 403


def test_handling_a_report_records_the_handler_and_audits_it(member, reports):
    client, person = member(SECURITY_ADMIN)
    report = reports[0]
    url = reverse("admin:safety_app_answerreport_change", args=[report.pk])
    page = client.get(url)
    assert page.status_code == 200 and "今天是 15 元" in page.content.decode()

    response = client.post(url, admin_form_data(page, status="resolved", outcome="回答价格有误，已通知食堂更新菜单。",
                                                answer="改掉的回答", reason="other"))

    assert response.status_code == 302, response.content.decode()[:2000]
    report.refresh_from_db()
    assert (report.status, report.outcome, report.handled_by_id) == ("resolved", "回答价格有误，已通知食堂更新菜单。", person.id)
    assert report.handled_at is not None
    assert (report.answer, report.reason) == ("红烧肉 12 元", "false")  # what was reported stays as filed
    handled = AuditEvent.objects.get(event="report_handled")
    assert (handled.actor_id, handled.target) == (person.id, f"safety_app.answerreport:{report.pk}")
    assert handled.details["status"] == {"from": "pending", "to": "resolved"}
    assert audit_verify()[1] == []

    # The outcome alone rewritten later: audited, the handler and the time kept.
    handled_at = report.handled_at
    page = client.get(url)
    client.post(url, admin_form_data(page, outcome="已更新菜单。"))
    report.refresh_from_db()
    assert (report.outcome, report.handled_at, report.handled_by_id) == ("已更新菜单。", handled_at, person.id)
    assert AuditEvent.objects.filter(event="report_handled").count() == 2
    assert client.post(reverse("admin:safety_app_answerreport_delete", args=[report.pk])).status_code == 403
    assert AnswerReport.objects.filter(pk=report.pk).exists()


def test_a_saved_form_that_changes_nothing_records_no_handling(member, reports):
    client, _ = member(SECURITY_ADMIN)
    url = reverse("admin:safety_app_answerreport_change", args=[reports[1].pk])

    assert client.post(url, admin_form_data(client.get(url))).status_code == 302

    reports[1].refresh_from_db()
    assert reports[1].handled_by_id is None and not AuditEvent.objects.filter(event="report_handled").exists()


def test_the_system_admin_cannot_open_the_reports(member, reports):
    client, _ = member(SYSTEM_ADMIN)

    assert client.get(LIST).status_code == 403
