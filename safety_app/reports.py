"""Reports of answers (举报, docs/safety.md#reports-举报): a student files one, staff handle it.

The gateway (chat_app) finds the answer and its question and passes them here as text: this app
sits below chat_app and knows nothing of its messages. Both moves write an audit row in the same
transaction as the change they record.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import OuterRef, Subquery
from django.utils import timezone
from loguru import logger

from audit_app.chain import Event, audit_record
from campus_agent.base.text import label_clean, text_clean
from campus_agent.base.windows import window_count
from safety_app.models import REPORT_SNAPSHOT_MAX, AnswerReport

REPORT_WINDOW_SEC = 3600


class ReportRateLimited(Exception):
    """More new reports this hour than REPORTS_PER_HOUR."""

    def __init__(self, limit: int):
        super().__init__(limit)
        self.limit = limit


@dataclass(frozen=True)
class Filed:
    report: AnswerReport
    created: bool  # False: the student had reported this answer already


def _snapshot(text: str) -> str:
    return text_clean(text or "")[:REPORT_SNAPSHOT_MAX]


def report_file(
    *,
    user,
    message_id: uuid.UUID,
    conversation_id: uuid.UUID,
    question: str,
    answer: str,
    agent_name: str = "",
    reason: str,
    detail: str = "",
    request=None,
) -> Filed:
    """Files `user`'s report of one answer, or returns the one they filed before (not counted
    again, not changed). A new report counts in the student's hourly window first
    (REPORTS_PER_HOUR; ReportRateLimited past it) and is audited."""
    existing = AnswerReport.objects.filter(reporter=user, message_id=message_id).first()
    if existing is not None:
        return Filed(existing, created=False)
    limit = settings.REPORTS_PER_HOUR
    # Counted in the cache, shared by the workers (docs/security.md#limits-across-workers).
    if window_count(f"report:rate:{user.pk}", REPORT_WINDOW_SEC) > limit:
        raise ReportRateLimited(limit)
    try:
        with transaction.atomic():
            report = AnswerReport.objects.create(
                reporter=user,
                message_id=message_id,
                conversation_id=conversation_id,
                agent_name=label_clean(agent_name)[:100],
                question=_snapshot(question),
                answer=_snapshot(answer),
                reason=reason,
                detail=label_clean(detail, multiline=True),
            )
            audit_record(
                event=Event.REPORT_FILED,
                request=request,
                actor=user,
                target=f"safety_app.answerreport:{report.pk}",
                details={"reason": reason, "message_id": str(message_id), "conversation_id": str(conversation_id)},
            )
    except IntegrityError:  # the same report filed at the same moment by another request
        return Filed(AnswerReport.objects.get(reporter=user, message_id=message_id), created=False)
    logger.info("answer report {} filed on message={} user={} reason={}", report.pk, message_id, user.pk, reason)
    return Filed(report, created=True)


def report_handle(*, report: AnswerReport, status: str, outcome: str, staff, request=None) -> AnswerReport:
    """Staff's move on a report: its status and outcome. A change of status names `staff` as the
    handler, now as the time; every change is audited (from → to)."""
    before = AnswerReport.objects.filter(pk=report.pk).values("status", "outcome").first() or {}
    status_changed = before.get("status") != status
    outcome_changed = before.get("outcome") != outcome
    if not status_changed and not outcome_changed:
        return report
    with transaction.atomic():
        report.status = status
        report.outcome = outcome
        fields = ["status", "outcome"]
        if status_changed:
            report.handled_by = staff
            report.handled_at = timezone.now()
            fields += ["handled_by", "handled_at"]
        report.save(update_fields=fields)
        audit_record(
            event=Event.REPORT_HANDLED,
            request=request,
            actor=staff,
            target=f"safety_app.answerreport:{report.pk}",
            details={
                "status": {"from": before.get("status"), "to": status},
                "outcome_changed": outcome_changed,
                "reason": report.reason,
                "message_id": str(report.message_id),
            },
        )
    return report


def reports_by_answer(*, user, conversation_id) -> dict[str, dict]:
    """`user`'s reports in one conversation: answer id → {"status", "status_label"} (the page's state)."""
    rows = AnswerReport.objects.filter(reporter=user, conversation_id=conversation_id)
    return {str(r.message_id): {"status": r.status, "status_label": str(r.get_status_display())} for r in rows}


def report_status_of(*, user) -> Subquery:
    """The status of `user`'s report of each message of a queryset (`OuterRef("id")`), or null:
    annotate a message list with it."""
    mine = AnswerReport.objects.filter(reporter=user, message_id=OuterRef("id"))
    return Subquery(mine.values("status")[:1])
