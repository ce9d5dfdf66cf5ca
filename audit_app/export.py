"""The auditor's export of the audit log: CSV or JSON lines, every field (the hashes too, so a copy
can be checked away from the server). An export is itself an audit row, written before the first
line leaves."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator

from audit_app.chain import HASHED_FIELDS, Event, audit_record, row_values
from audit_app.models import AuditEvent

FORMATS = ("csv", "jsonl")
FIELDS = [*HASHED_FIELDS, "hash"]
CONTENT_TYPES = {"csv": "text/csv; charset=utf-8", "jsonl": "application/x-ndjson; charset=utf-8"}
# A cell a spreadsheet would run as a formula (a refused sign-in's typed name may be "=HYPERLINK(…)").
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _values(row: AuditEvent) -> dict:
    return {**row_values(row), "hash": row.hash}


def _csv_cell(value) -> str:
    if isinstance(value, dict):
        value = json.dumps(value, ensure_ascii=False, sort_keys=True)
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(_FORMULA_START) else text


def export_lines(queryset, fmt: str) -> Iterator[str]:
    rows = queryset.order_by("id").iterator(chunk_size=2000)
    if fmt == "jsonl":
        for row in rows:
            yield json.dumps(_values(row), ensure_ascii=False) + "\n"
        return
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    yield "\ufeff"  # Excel reads UTF-8 (Chinese names) only after a BOM
    for values in ([FIELDS], ([_csv_cell(v) for v in _values(row).values()] for row in rows)):
        for line in values:
            writer.writerow(line)
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()


def audit_export(
    *, queryset, fmt: str, filters: dict, request=None, actor_username: str | None = None
) -> Iterator[str]:
    """Records the export (who, which format, which filters, how many rows), then its lines."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}")
    audit_record(
        event=Event.AUDIT_EXPORT,
        request=request,
        actor_username=actor_username,
        target=fmt,
        details={"format": fmt, "filters": filters, "count": queryset.count()},
    )
    return export_lines(queryset, fmt)
