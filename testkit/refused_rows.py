"""A refusal by the database itself (a trigger), for tests of what is kept when storing fails."""
from contextlib import contextmanager

from django.db import connection


@contextmanager
def rows_refused(condition: str):
    """The database itself refuses Message rows matching `condition` (SQL on NEW) while the block runs."""
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(
                "CREATE TRIGGER test_refuse BEFORE INSERT ON chat_app_message "
                f"WHEN {condition} BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
            )
        else:
            cursor.execute(
                "CREATE OR REPLACE FUNCTION test_refuse() RETURNS trigger AS $$ "
                "BEGIN RAISE EXCEPTION 'refused by the test'; END $$ LANGUAGE plpgsql"
            )
            cursor.execute(
                "CREATE TRIGGER test_refuse BEFORE INSERT ON chat_app_message FOR EACH ROW "
                f"WHEN ({condition}) EXECUTE FUNCTION test_refuse()"
            )
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            if connection.vendor == "sqlite":
                cursor.execute("DROP TRIGGER IF EXISTS test_refuse")
            else:
                cursor.execute("DROP TRIGGER IF EXISTS test_refuse ON chat_app_message")
                cursor.execute("DROP FUNCTION IF EXISTS test_refuse()")
