"""Writing, checking and purging the audit chain (docs/design.md#campus-identity-and-audit).

Each row's `hash` is SHA-256 over a canonical JSON of its fields and `prev_hash`, the hash of the
row before it. An append locks the chain's head row first (SELECT … FOR UPDATE on PostgreSQL;
SQLite's transactions here are IMMEDIATE, so the database's write lock already serialises them),
then takes the next id and the head's hash: two workers writing at once never chain onto the
same row, and ids stay consecutive, so a deleted row shows as a gap.

`audit_record` joins the caller's transaction when there is one: the row commits, or rolls
back, with the change it records.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from audit_app.models import GENESIS_HASH, AuditChainHead, AuditEvent
from campus_agent.base.request_id import NO_REQUEST_ID, request_id_get
from campus_agent.base.text import label_clean

Event = AuditEvent.Event
Outcome = AuditEvent.Outcome

# What the PostgreSQL trigger reads to let `audit_purge` delete rows older than it (and older
# than the legal minimum, which the trigger checks itself): migrations/0002_append_only.py.
PURGE_SETTING = "campus_agent.audit_purge_before"
TARGET_MAX = 255
USERNAME_MAX = 150


def _time_text(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


# What a row's hash covers (its own hash aside): its fields and the previous row's hash.
HASHED_FIELDS = ("id", "time", "actor_id", "actor_username", "source", "event", "target", "outcome", "request_id",
                 "details", "prev_hash")


def row_values(row: AuditEvent) -> dict:
    """The row's hashed fields as they are hashed and exported (the time as canonical text)."""
    values = {name: getattr(row, name) for name in HASHED_FIELDS}
    values["time"] = _time_text(row.time)
    return values


def event_hash(row: AuditEvent) -> str:
    """SHA-256 of the row's fields (its own hash aside) and prev_hash, as canonical JSON."""
    body = row_values(row)
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def _head_locked() -> AuditChainHead:
    """The chain's head, locked until the transaction ends. Made when missing (a fresh or
    flushed table) from the table's last row, so the chain goes on where it ends."""
    head = AuditChainHead.objects.select_for_update().filter(pk=1).first()
    if head is None:
        last = AuditEvent.objects.order_by("-id").only("id", "hash").first()
        AuditChainHead.objects.bulk_create(
            [AuditChainHead(pk=1, last_id=last.id if last else 0, last_hash=last.hash if last else GENESIS_HASH)],
            ignore_conflicts=True,
        )
        head = AuditChainHead.objects.select_for_update().get(pk=1)
    return head


def _request_source(request) -> str:
    return (request.META.get("REMOTE_ADDR") or "")[:64] if request is not None else ""


def audit_record(
    *,
    event: str,
    outcome: str = Outcome.OK,
    request=None,
    actor=None,
    actor_username: str | None = None,
    target: str = "",
    details: dict | None = None,
) -> AuditEvent:
    """Appends one row. `actor` defaults to the request's signed-in user; `actor_username` names
    someone without a user (a refused sign-in's typed name, a command's operator): cleaned like
    any label others read, so a typed bidi override or line break cannot mislead the auditor.
    A superuser's row says so (details.superuser): bootstrap use is audited too."""
    if actor is None and request is not None:
        user = getattr(request, "user", None)
        actor = user if user is not None and user.is_authenticated else None
    details = json.loads(json.dumps(details or {}, default=str))  # as the database will give it back
    if actor is not None and actor.is_superuser:
        details["superuser"] = True
    rid = request_id_get()
    with transaction.atomic():
        head = _head_locked()
        row = AuditEvent(
            id=head.last_id + 1,
            time=timezone.now(),
            actor=actor,
            actor_username=(actor.get_username() if actor is not None else label_clean(actor_username or ""))[
                :USERNAME_MAX
            ],
            source=_request_source(request),
            event=event,
            target=label_clean(str(target))[:TARGET_MAX],
            outcome=outcome,
            request_id="" if rid == NO_REQUEST_ID else rid,
            details=details,
            prev_hash=head.last_hash,
        )
        row.hash = event_hash(row)
        row.save(force_insert=True)
        AuditChainHead.objects.filter(pk=1).update(last_id=row.id, last_hash=row.hash)
    return row


def audit_bulk_append(*, rows: list[AuditEvent], batch: int = 5000) -> None:
    """Appends `rows` as they are (their time included) in one locked transaction, hashed in a
    loop and inserted in batches: for imports and the volume benchmark (bench/audit_volume.py),
    not for events as they happen (those go through audit_record)."""
    with transaction.atomic():
        head = _head_locked()
        last_id, last_hash = head.last_id, head.last_hash
        for row in rows:
            last_id += 1
            row.id, row.prev_hash = last_id, last_hash
            row.details = json.loads(json.dumps(row.details or {}, default=str))
            row.hash = last_hash = event_hash(row)
        AuditEvent.objects.bulk_create(rows, batch_size=batch)
        AuditChainHead.objects.filter(pk=1).update(last_id=last_id, last_hash=last_hash)


# --- checking ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    kind: str  # changed | missing | inserted
    id: int
    text: str

    def __str__(self) -> str:
        return f"{self.kind} #{self.id}: {self.text}"


def _chain_start() -> tuple[int, str]:
    """The id and prev_hash the first row must have: after the latest purge, the row after the
    last purged one; else the genesis."""
    purge = AuditEvent.objects.filter(event=Event.AUDIT_PURGE).order_by("-id").only("details").first()
    if purge is None:
        return 1, GENESIS_HASH
    return int(purge.details["purged_through_id"]) + 1, str(purge.details["purged_through_hash"])


def audit_verify(*, batch: int = 5000) -> tuple[int, list[Problem]]:
    """Walks the chain: (rows checked, problems). A row whose fields no longer match its hash is
    changed; a gap in the ids is missing rows; a row before the chain's start, after its head, or
    that does not chain onto the row before it (a row put in, or the one before replaced with a
    re-computed hash) is inserted."""
    head = AuditChainHead.objects.filter(pk=1).first()
    head_id, head_hash = (head.last_id, head.last_hash) if head else (0, GENESIS_HASH)
    expected_id, expected_prev = _chain_start()
    problems: list[Problem] = []
    checked = 0
    for row in AuditEvent.objects.order_by("id").iterator(chunk_size=batch):
        checked += 1
        if row.id < expected_id or row.id > head_id:
            where = "before the chain's start" if row.id < expected_id else "after the chain's head"
            problems.append(Problem("inserted", row.id, f"a row {where}"))
            continue
        if row.id > expected_id:
            problems.append(Problem("missing", expected_id, f"rows #{expected_id}–#{row.id - 1} are missing"))
        elif row.prev_hash != expected_prev:
            problems.append(
                Problem("inserted", row.id, f"does not chain onto #{row.id - 1}: inserted, or #{row.id - 1} replaced")
            )
        if row.hash != event_hash(row):
            problems.append(Problem("changed", row.id, "its fields no longer match its hash"))
        expected_id, expected_prev = row.id + 1, row.hash
    if expected_id <= head_id:
        problems.append(Problem("missing", expected_id, f"rows #{expected_id}–#{head_id} are missing"))
    elif expected_id == head_id + 1 and checked and expected_prev != head_hash:
        problems.append(Problem("changed", head_id, "the last row is not the one the chain's head records"))
    return checked, problems


# --- retention --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Purged:
    count: int
    through_id: int | None


def audit_purge(*, now: datetime | None = None) -> Purged:
    """Deletes the rows older than AUDIT_RETENTION_DAYS and appends an anchor row (event
    audit_purge) recording the last purged id and hash, from which audit_verify starts."""
    days = max(settings.AUDIT_RETENTION_DAYS, settings.AUDIT_RETENTION_DAYS_MIN)  # settings.py refuses less
    cutoff = (now or timezone.now()) - timedelta(days=days)
    with transaction.atomic():
        _head_locked()  # no append between choosing the rows and the anchor
        last = AuditEvent.objects.filter(time__lt=cutoff).order_by("-id").only("id", "hash").first()
        if last is None:
            return Purged(count=0, through_id=None)
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SELECT set_config(%s, %s, true)", [PURGE_SETTING, _time_text(cutoff)])
        count, _ = AuditEvent.objects.filter(id__lte=last.id).delete()
        audit_record(
            event=Event.AUDIT_PURGE,
            actor_username="manage.py audit_purge",
            target=f"#{last.id}",
            details={
                "purged_through_id": last.id,
                "purged_through_hash": last.hash,
                "count": count,
                "before": _time_text(cutoff),
                "retention_days": days,
            },
        )
    return Purged(count=count, through_id=last.id)
