"""Migration 0005 gives the AuthSession rows that exist already their user's password
fingerprint, so the upgrade logs nobody out and a later password change still revokes them."""
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.embedded]

BEFORE = [("chat_app", "0004_message_request_id_length")]
AFTER = [("chat_app", "0005_authsession_password_fingerprint")]


def _migrate(targets):
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def test_existing_sessions_get_the_fingerprint_of_their_users_current_password(password):
    old_apps = _migrate(BEFORE)
    try:
        User = old_apps.get_model("auth", "User")
        AuthSession = old_apps.get_model("chat_app", "AuthSession")
        student = User.objects.create(username="20230077")
        student_row = AuthSession.objects.create(user=student, expires_at=timezone.now() + timedelta(hours=1))

        new_apps = _migrate(AFTER)
        migrated = new_apps.get_model("chat_app", "AuthSession").objects.get(pk=student_row.pk)
        user = get_user_model().objects.get(pk=student.pk)
        assert migrated.password_fingerprint == user.get_session_auth_hash() != ""
    finally:
        _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
