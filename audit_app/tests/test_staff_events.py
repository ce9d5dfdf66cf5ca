"""Staff changes in admin are audited: a catalog change with the version it made, a rollback, a
change to a user (no history: the admin's LogEntry), each in the change's own transaction."""

import re

import pytest
from django.urls import reverse

from audit_app.chain import audit_verify
from audit_app.models import AuditEvent
from testkit.web.admin_forms import admin_form_data

pytestmark = pytest.mark.django_db


def _change(client, obj, **overrides):
    url = reverse(f"admin:{obj._meta.app_label}_{obj._meta.model_name}_change", args=[obj.pk])
    response = client.post(url, admin_form_data(client.get(url), **overrides))
    assert response.status_code == 302, response.content.decode()[:2000]


def test_a_catalog_change_records_its_version_and_a_rollback_records_itself(staff_client, staff_user, sub_agent):
    _change(staff_client, sub_agent, description="订餐：查询今天的菜单。")
    version = sub_agent.history.latest()
    _change(staff_client, sub_agent, description="改坏了")

    url = reverse("admin:subagents_app_subagent_history_rollback", args=[sub_agent.pk, version.history_id])
    response = staff_client.post(url, {"confirm": "1"})
    if response.status_code == 200:  # insights_app's routing preview first: confirm it
        fields = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', response.content.decode()))
        response = staff_client.post(url, {"confirm": "1", **fields})
    assert response.status_code == 302

    rows = list(AuditEvent.objects.exclude(event="sign_in").order_by("id"))
    assert [(r.event, r.actor_username, r.target) for r in rows] == [
        ("staff_change", staff_user.username, f"subagents_app.subagent:{sub_agent.pk}"),
        ("staff_change", staff_user.username, f"subagents_app.subagent:{sub_agent.pk}"),
        ("rollback", staff_user.username, f"subagents_app.subagent:{sub_agent.pk}"),
    ]
    assert rows[0].details["version"] == version.history_id and rows[0].details["action"] == "change"
    assert rows[2].details["version"] == sub_agent.history.latest().history_id
    assert rows[2].details["reason"].startswith("回滚到 ") and rows[2].details["superuser"] is True
    assert audit_verify()[1] == []


def test_a_group_added_and_changed_in_admin_is_recorded_from_the_admin_log(staff_client, staff_user):
    from django.contrib.auth.models import Group

    assert staff_client.post(reverse("admin:auth_group_add"), {"name": "研究生"}).status_code == 302
    group = Group.objects.get(name="研究生")
    _change(staff_client, group, name="博士生")

    rows = list(AuditEvent.objects.filter(event="staff_change").order_by("id"))
    assert [(r.actor_username, r.target, r.details["action"]) for r in rows] == [
        (staff_user.username, f"auth.group:{group.pk}", "add"),
        (staff_user.username, f"auth.group:{group.pk}", "change"),
    ]
    assert rows[1].details["object"] == "博士生"


def test_users_deleted_together_in_admin_are_each_recorded(staff_client, staff_user, password):
    from django.contrib.auth import get_user_model

    students = [get_user_model().objects.create_user(username=f"2023{i:04d}", password=password) for i in range(3)]
    response = staff_client.post(
        reverse("admin:auth_user_changelist"),
        {"action": "delete_selected", "post": "yes", "_selected_action": [s.pk for s in students]},
    )
    assert response.status_code == 302

    rows = AuditEvent.objects.filter(event="staff_change").order_by("id")
    assert sorted(r.target for r in rows) == sorted(f"auth.user:{s.pk}" for s in students)
    assert {(r.actor_username, r.details["action"]) for r in rows} == {(staff_user.username, "delete")}


def test_a_catalog_save_outside_a_request_is_not_a_staff_change(sub_agent):
    sub_agent.description = "命令行导入"
    sub_agent.save()

    assert not AuditEvent.objects.filter(event="staff_change").exists()
