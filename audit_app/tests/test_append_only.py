"""On PostgreSQL the audit table refuses UPDATE and DELETE whoever asks (the ORM, plain SQL, a
shell); only the purge deletes, and only rows past six months (audit_app/migrations/0002)."""

from datetime import timedelta

import pytest
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from audit_app.chain import PURGE_SETTING, Event, Outcome, audit_bulk_append, audit_record, audit_verify
from audit_app.models import AuditEvent

pytestmark = [pytest.mark.django_db, pytest.mark.skipif("connection.vendor != 'postgresql'")]


def _refused(action) -> None:
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        action()


def _sql(statement: str, params=()) -> None:
    with connection.cursor() as cursor:
        cursor.execute(statement, params)


def test_an_update_through_the_orm_is_refused():
    row = audit_record(event=Event.SIGN_IN, actor_username="alice")

    _refused(lambda: AuditEvent.objects.filter(id=row.id).update(outcome=Outcome.REFUSED))
    row.target = "x"
    _refused(lambda: row.save())
    assert audit_verify() == (1, [])


def test_a_delete_through_the_orm_is_refused():
    row = audit_record(event=Event.SIGN_IN, actor_username="alice")

    _refused(lambda: row.delete())
    _refused(lambda: AuditEvent.objects.all().delete())
    assert audit_verify() == (1, [])


def test_update_and_delete_in_plain_sql_are_refused():
    audit_record(event=Event.SIGN_IN, actor_username="alice")

    _refused(lambda: _sql("UPDATE audit_app_auditevent SET target = 'x'"))
    _refused(lambda: _sql("DELETE FROM audit_app_auditevent"))
    assert audit_verify() == (1, [])


def test_the_purge_setting_does_not_open_rows_younger_than_six_months():
    now = timezone.now()
    audit_bulk_append(rows=[AuditEvent(time=now - timedelta(days=100), event=Event.SIGN_IN, outcome=Outcome.OK)])

    def delete_with_the_setting():
        _sql("SELECT set_config(%s, %s, true)", [PURGE_SETTING, now.isoformat()])
        _sql("DELETE FROM audit_app_auditevent")

    _refused(delete_with_the_setting)
    assert AuditEvent.objects.count() == 1


def test_even_an_old_row_cannot_be_updated_with_the_purge_setting():
    now = timezone.now()
    audit_bulk_append(rows=[AuditEvent(time=now - timedelta(days=400), event=Event.SIGN_IN, outcome=Outcome.OK)])

    def update_with_the_setting():
        _sql("SELECT set_config(%s, %s, true)", [PURGE_SETTING, now.isoformat()])
        _sql("UPDATE audit_app_auditevent SET target = 'x'")

    _refused(update_with_the_setting)
