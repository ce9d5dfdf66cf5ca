"""The audit chain: appended under one lock, checked by audit_verify, purged to an anchor."""

import subprocess
import sys
import threading
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, connections
from django.utils import timezone

from audit_app.chain import Event, Outcome, audit_bulk_append, audit_purge, audit_record, audit_verify, event_hash
from audit_app.models import AuditChainHead, AuditEvent
from testkit.processes import BASE_DIR, project_env


def sqlite_only(test):
    """Edits the append-only trigger refuses on PostgreSQL, caught by verify on SQLite: run in
    CI's SQLite pass (marked embedded), skipped on PostgreSQL."""
    return pytest.mark.embedded(pytest.mark.skipif("connection.vendor != 'sqlite'")(test))


def _record(n: int = 1, **fields) -> list[AuditEvent]:
    return [audit_record(event=Event.SIGN_IN, actor_username=f"user{i}", target="page", **fields) for i in range(n)]


def _problems() -> list[str]:
    return [str(p) for p in audit_verify()[1]]


@pytest.mark.django_db
def test_rows_chain_each_onto_the_one_before_and_verify_passes():
    rows = _record(3)

    assert [r.id for r in rows] == [1, 2, 3]
    assert rows[0].prev_hash == "0" * 64
    assert rows[1].prev_hash == rows[0].hash and rows[2].prev_hash == rows[1].hash
    assert all(r.hash == event_hash(AuditEvent.objects.get(id=r.id)) for r in rows)  # as stored, as read back
    assert audit_verify() == (3, [])


@pytest.mark.django_db
def test_a_superusers_row_says_so(django_user_model):
    root = django_user_model.objects.create_superuser("root", password="x")

    row = audit_record(event=Event.STAFF_CHANGE, actor=root, target="agent 1")

    assert row.details == {"superuser": True} and row.actor_username == "root"


@pytest.mark.django_db
def test_a_typed_name_cannot_mislead_the_auditor():
    row = audit_record(event=Event.SIGN_IN, outcome=Outcome.REFUSED, actor_username="admin\u202e\nnimda", target="x\ny")

    assert (row.actor_username, row.target) == ("admin nimda", "x y")
    assert audit_verify() == (1, [])


@pytest.mark.django_db
@sqlite_only
def test_verify_names_a_row_changed_through_the_orm():
    _record(3)
    AuditEvent.objects.filter(id=2).update(outcome=Outcome.REFUSED)

    assert _problems() == ["changed #2: its fields no longer match its hash"]
    with pytest.raises(CommandError, match="1 problem"):
        call_command("audit_verify")


@pytest.mark.django_db
@sqlite_only
def test_verify_names_a_row_changed_and_rehashed_by_the_one_after_it():
    _record(3)
    row = AuditEvent.objects.get(id=2)
    row.target = "elsewhere"
    row.hash = event_hash(row)
    AuditEvent.objects.filter(id=2).update(target=row.target, hash=row.hash)

    assert _problems() == ["inserted #3: does not chain onto #2: inserted, or #2 replaced"]


@pytest.mark.django_db
@sqlite_only
def test_verify_names_a_missing_row_in_the_middle_and_at_the_end():
    _record(4)
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM audit_app_auditevent WHERE id IN (2, 4)")

    assert _problems() == ["missing #2: rows #2–#2 are missing", "missing #4: rows #4–#4 are missing"]


@pytest.mark.django_db
@sqlite_only
def test_verify_names_a_row_inserted_after_the_head_even_with_a_valid_hash():
    first = _record(1)[0]
    forged = AuditEvent(
        id=2,
        time=timezone.now(),
        event=Event.SIGN_IN,
        outcome=Outcome.OK,
        actor_username="x",
        prev_hash=first.hash,
        details={},
    )
    forged.hash = event_hash(forged)
    forged.save(force_insert=True)

    assert _problems() == ["inserted #2: a row after the chain's head"]


@pytest.mark.django_db
def test_the_audit_verify_command_reports_an_intact_chain(capsys):
    _record(2)

    call_command("audit_verify")

    assert "audit chain intact: 2 rows; head #2" in capsys.readouterr().out


@pytest.mark.django_db(transaction=True)
def test_two_writers_at_once_keep_one_unbroken_chain():
    """Threads with their own connections append at the same time: ids stay consecutive and every
    row chains onto the one before (no two rows onto the same one)."""
    per_writer, writers = 15, 4
    barrier = threading.Barrier(writers)
    failures = []

    def write(index: int) -> None:
        try:
            barrier.wait()
            for _ in range(per_writer):
                audit_record(event=Event.SIGN_IN, actor_username=f"writer{index}")
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            failures.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert failures == []
    assert list(AuditEvent.objects.order_by("id").values_list("id", flat=True)) == list(range(1, 61))
    assert audit_verify() == (60, [])


def _old_rows(days_ago: list[int]) -> None:
    now = timezone.now()
    audit_bulk_append(
        rows=[
            AuditEvent(time=now - timedelta(days=d), event=Event.SIGN_IN, outcome=Outcome.OK, actor_username=f"old{d}")
            for d in days_ago
        ]
    )


@pytest.mark.django_db
def test_the_purge_deletes_rows_past_retention_and_leaves_a_verifiable_chain(settings):
    settings.AUDIT_RETENTION_DAYS = 200
    _old_rows([400, 300, 250, 100])
    _record(1)

    purged = audit_purge()

    assert (purged.count, purged.through_id) == (3, 3)
    assert list(AuditEvent.objects.order_by("id").values_list("id", "event")) == [
        (4, "sign_in"),
        (5, "sign_in"),
        (6, "audit_purge"),
    ]
    anchor = AuditEvent.objects.get(id=6)
    assert anchor.details["purged_through_id"] == 3 and anchor.details["count"] == 3
    assert audit_verify() == (3, [])

    _old_rows([])  # nothing
    assert audit_purge().count == 0  # nothing left past retention
    assert audit_verify() == (3, [])


@pytest.mark.django_db
@sqlite_only
def test_after_a_purge_verify_still_finds_the_oldest_kept_row_deleted(settings):
    settings.AUDIT_RETENTION_DAYS = 200
    _old_rows([400, 100, 50])
    audit_purge()
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM audit_app_auditevent WHERE id = 2")

    assert _problems() == ["missing #2: rows #2–#2 are missing"]


@pytest.mark.django_db
def test_the_purge_command_keeps_six_months_whatever_the_setting_says(settings):
    settings.AUDIT_RETENTION_DAYS = 30  # settings.py refuses this at start; the purge does too
    _old_rows([190, 170])

    call_command("audit_purge")

    assert list(AuditEvent.objects.filter(event=Event.SIGN_IN).values_list("actor_username", flat=True)) == ["old170"]
    assert AuditChainHead.objects.get().last_id == 3
    assert audit_verify()[1] == []


def test_a_retention_under_180_days_stops_the_start(tmp_path):
    done = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=BASE_DIR,
        capture_output=True,
        text=True,
        env=project_env(tmp_path, AUDIT_RETENTION_DAYS="179"),
        timeout=60,
    )

    assert done.returncode != 0
    assert "AUDIT_RETENTION_DAYS is 179" in done.stderr
