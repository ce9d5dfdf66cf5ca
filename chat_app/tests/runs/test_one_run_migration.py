"""Migration 0018 holds one run per conversation at a time in the database
(docs/security.md#one-run-per-conversation): runs that had not ended beside a newer one in the
same conversation (two questions sent at once, before it) are ended as interrupted first."""
from datetime import timedelta

import pytest
from django.utils import timezone

from testkit.migrations import migrate_to, migrate_to_newest, newest

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.embedded]

BEFORE = [("chat_app", "0017_wait"), newest("agents_app")]
AFTER = [("chat_app", "0018_run_one_active_per_conversation"), newest("agents_app")]


def test_older_runs_beside_a_newer_one_are_ended_and_the_newest_goes_on():
    old_apps = migrate_to(BEFORE)
    try:
        user = old_apps.get_model("auth", "User").objects.create(username="20230001")
        Conversation, Run = old_apps.get_model("chat_app", "Conversation"), old_apps.get_model("chat_app", "Run")
        crowded, calm = (Conversation.objects.create(user=user, title=t) for t in ("两个一起问", "一个"))

        def run(conversation, status="running"):
            return Run.objects.create(conversation=conversation, user=user, status=status, heartbeat_at=timezone.now())

        older, newer, alone, done = run(crowded, "waiting"), run(crowded), run(calm), run(calm, "finished")
        Run.objects.filter(id=older.id).update(started_at=timezone.now() - timedelta(minutes=1))

        new_apps = migrate_to(AFTER)
        statuses = dict(new_apps.get_model("chat_app", "Run").objects.values_list("id", "status"))
        assert statuses == {older.id: "interrupted", newer.id: "running", alone.id: "running", done.id: "finished"}
    finally:
        migrate_to_newest()
