"""Migration 0005 gives the AuthSession rows that exist already their user's password
fingerprint, so the upgrade logs nobody out and a later password change still revokes them."""
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from testkit.migrations import migrate_to, migrate_to_newest

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.embedded]

BEFORE = [("chat_app", "0004_message_request_id_length")]
AFTER = [("chat_app", "0005_authsession_password_fingerprint")]



def test_existing_sessions_get_the_fingerprint_of_their_users_current_password(password):
    old_apps = migrate_to(BEFORE)
    try:
        User = old_apps.get_model("auth", "User")
        AuthSession = old_apps.get_model("chat_app", "AuthSession")
        student = User.objects.create(username="20230077")
        student_row = AuthSession.objects.create(user=student, expires_at=timezone.now() + timedelta(hours=1))

        new_apps = migrate_to(AFTER)
        migrated = new_apps.get_model("chat_app", "AuthSession").objects.get(pk=student_row.pk)
        user = get_user_model().objects.get(pk=student.pk)
        assert migrated.password_fingerprint == user.get_session_auth_hash() != ""
    finally:
        migrate_to_newest()
