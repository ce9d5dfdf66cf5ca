"""Benchmark: the audit log at volume (issue 43 point 6) — appending rows, and finding one
person's rows in a date range among millions (the (actor, time) index), as the auditor's admin
filter and `audit_export --actor --since --until` do.

    .venv/bin/python bench/audit_volume.py [-n 1000000] [--database-url postgres://…/<name>] [--smoke]

A throw-away SQLite file by default; a PostgreSQL URL names a database that is migrated and used
as it is (rows are added to what it holds). The rows are appended with audit_bulk_append: hashed
and chained one by one in Python, inserted in batches (the per-row lock and round trips of
audit_record are what events as they happen pay; they are timed apart, on 200 rows). Then: the
median time of 20 searches by actor and a 30-day range (the newest 100, as a page shows them),
the query plan of one, and audit_verify's pace over the whole chain. `--smoke`: 2,000 rows.
"""

import argparse
import random
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._django_setup import django_migrated  # noqa: E402

BATCH = 20_000  # rows per transaction of audit_bulk_append
ACTORS = 20_000  # students and staff the rows are spread over
DAYS = 365


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=1_000_000, help="rows to add")
    parser.add_argument("--database-url", default="", help="default: a temporary SQLite file")
    parser.add_argument("--smoke", action="store_true", help="a tiny run (2,000 rows): the script still works")
    args = parser.parse_args()
    rows_wanted = 2_000 if args.smoke else args.n
    tmp = django_migrated(database_url=args.database_url, prefix="bench-audit-")  # noqa: F841 (kept for the run)
    from django.db import connection
    from django.utils import timezone

    from audit_app.chain import Event, Outcome, audit_bulk_append, audit_record, audit_verify
    from audit_app.models import AuditEvent

    rng = random.Random(43)
    now = timezone.now()
    events = [Event.SIGN_IN] * 6 + [Event.SIGN_OUT, Event.APPROVAL_DECISION, Event.API_KEY_CREATED, Event.DATA_EXPORT]

    def row(offset_sec: float) -> AuditEvent:
        actor = rng.randrange(1, ACTORS + 1)
        return AuditEvent(
            time=now - timedelta(days=DAYS) + timedelta(seconds=offset_sec),
            actor_id=actor,
            actor_username=f"2023{actor:05d}",
            source=f"10.{actor % 256}.{rng.randrange(256)}.7",
            event=rng.choice(events),
            target="page",
            outcome=Outcome.OK,
            request_id=f"{rng.getrandbits(64):016x}",
            details={"via": "password"},
        )

    step = DAYS * 86_400 / rows_wanted
    started = time.perf_counter()
    for first in range(0, rows_wanted, BATCH):
        audit_bulk_append(rows=[row(i * step) for i in range(first, min(first + BATCH, rows_wanted))])
    insert_sec = time.perf_counter() - started

    started = time.perf_counter()
    for _ in range(200):
        audit_record(event=Event.SIGN_IN, actor_username="bench", details={"via": "password"})
    record_ms = (time.perf_counter() - started) / 200 * 1000

    def search(actor: int) -> list:
        until = now - timedelta(days=rng.randrange(0, DAYS - 30))
        return list(
            AuditEvent.objects.filter(actor_id=actor, time__gte=until - timedelta(days=30), time__lt=until).order_by(
                "-time"
            )[:100]
        )

    timings, found = [], 0
    for _ in range(20):
        actor = rng.randrange(1, ACTORS + 1)
        started = time.perf_counter()
        found += len(search(actor))
        timings.append((time.perf_counter() - started) * 1000)
    query = AuditEvent.objects.filter(actor_id=7, time__gte=now - timedelta(days=60), time__lt=now - timedelta(days=30))
    plan = query.order_by("-time")[:100].explain()

    started = time.perf_counter()
    checked, problems = audit_verify()
    verify_sec = time.perf_counter() - started
    assert not problems, problems[:3]

    total = AuditEvent.objects.count()
    print(f"audit log at volume, {connection.vendor}, {total:,} rows:")
    print(
        f"  bulk append: {rows_wanted:,} rows in {insert_sec:.1f} s ({rows_wanted / insert_sec:,.0f} rows/s, hashed and chained)"
    )
    print(f"  audit_record: {record_ms:.2f} ms per row (lock, hash, insert, head; one transaction each)")
    print(
        f"  search by actor and date range: {statistics.median(timings):.2f} ms median of 20 "
        f"(max {max(timings):.2f} ms; {found} rows found)"
    )
    print("  its plan: " + " | ".join(line.strip() for line in plan.splitlines()[:3]))
    print(f"  audit_verify: {checked:,} rows in {verify_sec:.1f} s ({checked / verify_sec:,.0f} rows/s)")
    tmp.cleanup()


if __name__ == "__main__":
    main()
