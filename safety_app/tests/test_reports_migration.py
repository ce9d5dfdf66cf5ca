"""Migration safety_app 0002 makes the reports' table, and audit_app 0006 gives the 安全管理员 its
report permissions (and takes nothing else from any role); both go back cleanly."""

import uuid

import pytest
from django.db import connection

from audit_app.roles import SECURITY_ADMIN, role_codenames
from testkit.migrations import migrate_to, migrate_to_newest

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.embedded]

BEFORE = [("safety_app", "0001_word_lists"), ("audit_app", "0006_moderation_hit_event")]
AFTER = [("safety_app", "0002_answer_reports"), ("audit_app", "0007_report_events")]


def _held(apps, role: str) -> set[str]:
    return set(apps.get_model("auth", "Group").objects.get(name=role).permissions.values_list("codename", flat=True))


def test_the_reports_table_and_the_security_admins_permissions_come_and_go():
    try:
        old_apps = migrate_to(BEFORE)
        assert "safety_app_answerreport" not in connection.introspection.table_names()
        # A database from before the reports has no permission for them (going back keeps them),
        # and has the role (a transactional test's flush before this one may have taken it).
        old_apps.get_model("auth", "Permission").objects.filter(codename__endswith="_answerreport").delete()
        old_apps.get_model("auth", "Group").objects.get_or_create(name=SECURITY_ADMIN)
        assert not {"view_answerreport", "change_answerreport"} & _held(old_apps, SECURITY_ADMIN)

        new_apps = migrate_to(AFTER)
        User = new_apps.get_model("auth", "User")
        student = User.objects.create(username="20230077")
        report = new_apps.get_model("safety_app", "AnswerReport").objects.create(
            reporter=student, message_id=uuid.uuid4(), conversation_id=uuid.uuid4(), reason="other"
        )
        assert report.status == "pending"
        # The role holds exactly its list, the reports' two included.
        held = _held(new_apps, SECURITY_ADMIN)
        assert {"view_answerreport", "change_answerreport"} <= held
        assert held == {codename for _, codename in role_codenames(SECURITY_ADMIN)}

        migrate_to(BEFORE)
        assert "safety_app_answerreport" not in connection.introspection.table_names()
    finally:
        migrate_to_newest()
