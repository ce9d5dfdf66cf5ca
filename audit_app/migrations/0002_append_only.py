"""On PostgreSQL, a trigger refuses UPDATE and DELETE on the audit log, whoever asks (the ORM, a
shell, plain SQL). The one exception is `manage.py audit_purge`: it sets
campus_agent.audit_purge_before for its transaction, and the trigger then lets it delete rows
older than that moment, and never rows younger than the legal six months
(docs/operations.md#the-audit-log). SQLite has no such guard: `audit_verify` finds the change."""
from django.db import migrations

FUNCTION = """
CREATE OR REPLACE FUNCTION audit_app_append_only() RETURNS trigger AS $$
DECLARE
    purge_before text := current_setting('campus_agent.audit_purge_before', true);
BEGIN
    IF TG_OP = 'DELETE' AND coalesce(purge_before, '') <> ''
       AND OLD.time < purge_before::timestamptz AND OLD.time < now() - interval '180 days' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'the audit log is append-only: % refused', TG_OP USING ERRCODE = 'insufficient_privilege';
END
$$ LANGUAGE plpgsql;
CREATE TRIGGER audit_app_append_only BEFORE UPDATE OR DELETE ON audit_app_auditevent
    FOR EACH ROW EXECUTE FUNCTION audit_app_append_only();
"""
DROP = """
DROP TRIGGER IF EXISTS audit_app_append_only ON audit_app_auditevent;
DROP FUNCTION IF EXISTS audit_app_append_only();
"""


def _on_postgresql(sql: str):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql, params=None)  # no placeholders: the % in RAISE is plpgsql

    return run


class Migration(migrations.Migration):
    dependencies = [("audit_app", "0001_initial")]

    operations = [migrations.RunPython(_on_postgresql(FUNCTION), _on_postgresql(DROP))]
