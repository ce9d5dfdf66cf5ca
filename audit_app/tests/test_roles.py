"""The three staff roles (docs/staff.md): each group holds exactly its permissions, the admin
shows each only its pages, and only a superuser gives a role."""

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.urls import reverse

from audit_app.chain import Event, audit_record
from audit_app.models import AuditEvent
from audit_app.roles import AUDITOR, ROLES, SECURITY_ADMIN, SYSTEM_ADMIN, role_codenames, roles_apply

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _roles():
    """The migration's groups (made by roles_apply; a transactional test's flush before this one
    in the same process takes them away)."""
    roles_apply()


AUDIT_LIST = reverse("admin:audit_app_auditevent_changelist")


@pytest.fixture
def member(client, password):
    """`member(role)` → the test client signed in as a member of staff holding only `role`."""

    def make(role: str):
        person = get_user_model().objects.create_user(username=f"staff-{role}", password=password, is_staff=True)
        person.groups.add(Group.objects.get(name=role))
        client.force_login(person)
        return client

    return make


def _apps_shown(client) -> dict[str, set[str]]:
    page = client.get(reverse("admin:index"))
    assert page.status_code == 200
    return {app["app_label"]: {m["object_name"] for m in app["models"]} for app in page.context["app_list"]}


def test_each_role_holds_exactly_its_permissions():
    for role in ROLES:
        held = {(p.content_type.app_label, p.codename) for p in Group.objects.get(name=role).permissions.all()}
        assert held == role_codenames(role), role
    assert Permission.objects.filter(codename="export_auditevent").exists()


def test_the_system_admin_sees_the_catalog_and_not_the_audit_log(member, agent):
    client = member(SYSTEM_ADMIN)

    assert _apps_shown(client) == {
        "agents_app": {"Agent", "Provider", "McpService"},
        "subagents_app": {"SubAgent"},
        "insights_app": {"RoutingCase", "RoutingCheck"},
    }
    assert client.get(reverse("admin:agents_app_agent_change", args=[agent.pk])).status_code == 200
    assert client.get(AUDIT_LIST).status_code == 403
    assert client.get(reverse("admin:auth_user_changelist")).status_code == 403


def test_the_security_admin_sees_accounts_and_cannot_open_an_agent_or_the_audit_log(member, agent):
    client = member(SECURITY_ADMIN)

    assert _apps_shown(client) == {"auth": {"User", "Group"}, "chat_app": {"ApiKey", "AuthSession", "CampusIdentity", "CampusGroupGrant", "GroupLimits", "GroupMapping"},
                                    "safety_app": {"WordList", "ListWord", "AnswerReport", "ModerationModel"}}
    assert client.get(reverse("admin:agents_app_agent_change", args=[agent.pk])).status_code == 403
    assert client.get(AUDIT_LIST).status_code == 403


def test_the_auditor_sees_only_the_audit_log_and_changes_nothing(member, agent):
    row = audit_record(event=Event.SIGN_IN, actor_username="alice")
    client = member(AUDITOR)

    assert _apps_shown(client) == {"audit_app": {"AuditEvent"}}
    listing = client.get(AUDIT_LIST)
    assert listing.status_code == 200 and set(listing.context["action_form"].fields["action"].choices[1:]) == {
        ("export_csv", "导出所选（CSV）"),
        ("export_jsonl", "导出所选（JSON Lines）"),
    }
    assert client.post(reverse("admin:audit_app_auditevent_change", args=[row.id]), {"target": "x"}).status_code == 403
    assert client.get(reverse("admin:agents_app_agent_change", args=[agent.pk])).status_code == 403
    prompt = reverse("admin:agents_app_agent_change", args=[agent.pk])
    assert client.post(prompt, {"system_prompt": "改掉提示词"}).status_code == 403
    agent.refresh_from_db()
    assert agent.system_prompt != "改掉提示词"
    exported = client.post(AUDIT_LIST, {"action": "export_csv", "_selected_action": [row.id]})
    assert exported.status_code == 200 and AuditEvent.objects.filter(event="audit_export").count() == 1


# --- only a superuser gives a role -----------------------------------------------------------------


def _user_form(user, **overrides) -> dict:
    data = {
        "username": user.username,
        "first_name": user.first_name,
        "last_name": "",
        "email": "",
        "is_active": "on",
        "date_joined_0": "2026-01-01",
        "date_joined_1": "00:00:00",
        "groups": list(user.groups.values_list("pk", flat=True)),
        "user_permissions": [],
    }
    if user.is_staff:
        data["is_staff"] = "on"
    data.update(overrides)
    return {k: v for k, v in data.items() if v is not False}


def test_the_security_admin_manages_a_students_account(member, user):
    client = member(SECURITY_ADMIN)
    graduates = Group.objects.create(name="研究生")

    response = client.post(
        reverse("admin:auth_user_change", args=[user.pk]),
        _user_form(user, first_name="小明同学", groups=[graduates.pk]),
    )

    assert response.status_code == 302, response.content.decode()[:500]
    user.refresh_from_db()
    assert user.first_name == "小明同学" and list(user.groups.all()) == [graduates]


@pytest.mark.parametrize("attempt", ["superuser", "role", "permission"])
def test_the_security_admin_cannot_make_anyone_or_themselves_superuser_auditor_or_privileged(member, attempt):
    client = member(SECURITY_ADMIN)
    me = get_user_model().objects.get(username=f"staff-{SECURITY_ADMIN}")
    overrides = {
        "superuser": {"is_superuser": "on"},
        "role": {"groups": [*me.groups.values_list("pk", flat=True), Group.objects.get(name=AUDITOR).pk]},
        "permission": {"user_permissions": [Permission.objects.get(codename="view_auditevent").pk]},
    }[attempt]

    response = client.post(reverse("admin:auth_user_change", args=[me.pk]), _user_form(me, **overrides))

    assert response.status_code == 403
    me.refresh_from_db()
    assert not me.is_superuser and not me.has_perm("audit_app.view_auditevent")
    assert list(me.groups.values_list("name", flat=True)) == [SECURITY_ADMIN]


def test_the_security_admin_cannot_touch_another_staff_account_or_a_role_group(member, client, password):
    auditor = get_user_model().objects.create_user(username="auditor", password=password, is_staff=True)
    auditor.groups.add(Group.objects.get(name=AUDITOR))
    member(SECURITY_ADMIN)
    password_url = reverse("admin:auth_user_password_change", args=[auditor.pk])

    assert client.post(password_url, {"password1": "Taken-0ver!", "password2": "Taken-0ver!"}).status_code == 403
    assert client.post(reverse("admin:auth_user_delete", args=[auditor.pk]), {"post": "yes"}).status_code == 403
    role = Group.objects.get(name=AUDITOR)
    assert client.post(reverse("admin:auth_group_delete", args=[role.pk]), {"post": "yes"}).status_code == 403
    assert client.post(reverse("admin:auth_group_change", args=[role.pk]), {"name": "改名"}).status_code == 403
    auditor.refresh_from_db()
    assert auditor.check_password(password) and Group.objects.filter(name=AUDITOR).exists()
