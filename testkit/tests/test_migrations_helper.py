"""testkit.migrations leaves the test database as `migrate` would: with the triggers the
post_migrate handlers install (the catalog's and the word lists' stamps). SQLite drops a table's
triggers when a migration rebuilds it, and the suite's flush sends no post_migrate (suite_settings):
without this, a test after a migration test on the same process read a stale catalog."""

import pytest
from django.db import connection

from agents_app.models import Agent
from testkit.migrations import migrate_to, migrate_to_newest

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.embedded]


def _triggers(table: str) -> set[str]:
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = %s", [table])
            return {row[0] for row in cursor.fetchall()}
    with connection.cursor() as cursor:
        cursor.execute("SELECT tgname FROM pg_trigger WHERE tgrelid = %s::regclass AND NOT tgisinternal", [table])
        return {row[0] for row in cursor.fetchall()}


def test_the_stamp_triggers_are_back_after_a_trip_through_the_migrations():
    table = Agent.allowed_groups.through._meta.db_table
    before = _triggers(table)
    assert before
    try:
        migrate_to([("agents_app", "0015_text_line_endings")])
    finally:
        migrate_to_newest()
    assert _triggers(table) == before
