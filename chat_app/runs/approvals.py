"""The database side of approval (DESIGN §4a): a run pauses, people decide, a worker resumes it.

While a run waits it belongs to no worker: its row says `awaiting_approval` with no worker, its
finished rows are stored, each waiting call has a ToolApproval row, and `resume_state` holds
what the turn had. Whoever records the last decision (or the supervisor, once the calls expire)
claims the run with a conditional update, so exactly one worker resumes it — any worker, also
after a restart. Sync; the async side calls these through chat_app.asyncdb.
"""
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from loguru import logger

from agents_app.models import Agent
from agents_app.selectors import agent_catalog_load
from campus_agent.errors import GENERAL
from chat_app.models import Message, Run, ToolApproval
from chat_app.runs.registry import WORKER_ID
from chat_app.selectors import agent_get_default, history_build
from chat_app.services.recording import RowSpec

APPROVAL_CANCELLED_TEXT = {
    "stopped": "回答已停止，操作没有执行。",
    "superseded": "学生发送了新消息，操作没有执行。",
}
RUN_CLOSED_MESSAGE = {
    "stopped": "回答已停止。",
    "superseded": "等待批准时学生发送了新消息，这轮回答已结束。",
}


class ApprovalRefused(Exception):
    """The decision cannot be taken: `reason` is "no_call" (unknown call) or "decided" (not pending)."""

    def __init__(self, reason: str, status: str | None = None):
        super().__init__(reason)
        self.reason = reason
        self.status = status


@dataclass(frozen=True)
class Resumption:
    """A run this worker claimed to resume, with what its turn needs."""

    run: Run
    agent: Agent
    history: list[dict]
    state: dict
    decided: list[ToolApproval]


def run_pause(*, run: Run, rows: list[RowSpec], waiting: list[dict], state: dict, frames_seq: int) -> bool:
    """Stores the paused round (`rows`), one pending ToolApproval per waiting call
    ({call_id, tool, args, expires_at}), and the run's pause, in one transaction. False when the
    run was no longer running (a reaper took its worker for dead): nothing is written."""
    from chat_app.runs.services import run_rows_store

    with transaction.atomic():
        paused = Run.objects.filter(id=run.id, status=Run.Status.RUNNING).update(
            status=Run.Status.AWAITING_APPROVAL, worker="", partial_text="", slot_key="",
            frames_seq=frames_seq, resume_state=state,
        )
        if not paused:
            return False
        if rows:
            run_rows_store(run=run, rows=rows)
        ToolApproval.objects.bulk_create(
            ToolApproval(run_id=run.id, pause_seq=frames_seq, call_id=w["call_id"], tool=w["tool"], args=w["args"],
                         expires_at=w["expires_at"])
            for w in waiting
        )
    return True


def approval_decide(*, run: Run, call_id: str, approve: bool) -> ToolApproval:
    """Records one decision on a call of the run's current pause; raises ApprovalRefused."""
    current = ToolApproval.objects.filter(run_id=run.id, pause_seq=run.frames_seq, call_id=call_id)
    status = ToolApproval.Status.APPROVED if approve else ToolApproval.Status.REJECTED
    now = timezone.now()
    pending = current.filter(status=ToolApproval.Status.PENDING)
    decided = pending.filter(expires_at__gt=now).update(status=status, decided_at=now)
    if not decided:  # too late: it counts as rejected now, whether or not a supervisor saw it yet
        pending.update(status=ToolApproval.Status.EXPIRED, decided_at=now)
    approval = current.first()
    if approval is None:
        raise ApprovalRefused("no_call")
    if not decided:
        raise ApprovalRefused("decided", approval.status)
    logger.info("approval run={} call={} tool={} {}", run.id, call_id, approval.tool, status)
    return approval


def approvals_expire() -> list:
    """Marks every pending call past its deadline expired; the ids of the paused runs that now
    have no pending call (to be resumed)."""
    now = timezone.now()
    expired = list(
        ToolApproval.objects.filter(status=ToolApproval.Status.PENDING, expires_at__lte=now).values_list("id", "run_id")
    )
    if not expired:
        return []
    ToolApproval.objects.filter(id__in=[pk for pk, _ in expired], status=ToolApproval.Status.PENDING).update(
        status=ToolApproval.Status.EXPIRED, decided_at=now
    )
    run_ids = {run_id for _, run_id in expired}
    return list(
        Run.objects.filter(id__in=run_ids, status=Run.Status.AWAITING_APPROVAL)
        .exclude(approvals__status=ToolApproval.Status.PENDING)
        .values_list("id", flat=True)
    )


def run_resume_claim(*, run_id, slot_key: str = "") -> Resumption | None:
    """Claims a paused run whose calls are all decided, for this worker; None when it still
    waits, or another worker claimed it first, or it ended meanwhile."""
    with transaction.atomic():
        if ToolApproval.objects.filter(run_id=run_id, status=ToolApproval.Status.PENDING).exists():
            return None
        claimed = Run.objects.filter(id=run_id, status=Run.Status.AWAITING_APPROVAL).update(
            status=Run.Status.RUNNING, worker=WORKER_ID, heartbeat_at=timezone.now(), slot_key=slot_key
        )
        if not claimed:
            return None
    run = Run.objects.select_related("conversation__agent").get(id=run_id)
    agent = run.conversation.agent if run.conversation.agent and run.conversation.agent.enabled else agent_get_default()
    decided = list(ToolApproval.objects.filter(run_id=run_id, pause_seq=run.frames_seq).order_by("created_at", "id"))
    return Resumption(
        run=run,
        agent=agent_catalog_load(agent=agent),
        history=history_build(conversation=run.conversation, limit=_history_limit(run)),
        state=run.resume_state or {},
        decided=decided,
    )


def _history_limit(run: Run) -> int:
    """What a turn that had not paused would send: MAX_HISTORY rows up to its question, then
    the rows this run stored since (its rounds, which a running turn keeps in memory)."""
    own = Message.objects.filter(conversation_id=run.conversation_id, request_id=run.request_id).count()
    return settings.MAX_HISTORY + max(own - 1, 0)


def run_paused_close(*, run_id, reason: str) -> Run | None:
    """Ends a paused run without resuming it (stopped, or a new question in its conversation):
    its waiting calls are cancelled and stored as not run, the reply so far stored as interrupted.
    None when it was not paused (nothing is written)."""
    from chat_app.runs.services import run_rows_store

    with transaction.atomic():
        closed = Run.objects.filter(id=run_id, status=Run.Status.AWAITING_APPROVAL).update(
            status=Run.Status.INTERRUPTED, ended_at=timezone.now()
        )
        if not closed:
            return None
        run = Run.objects.get(id=run_id)
        waiting = list(ToolApproval.objects.filter(run_id=run_id, pause_seq=run.frames_seq).order_by("created_at", "id"))
        ToolApproval.objects.filter(run_id=run_id, status=ToolApproval.Status.PENDING).update(
            status=ToolApproval.Status.CANCELLED, decided_at=timezone.now()
        )
        text = APPROVAL_CANCELLED_TEXT[reason]
        rows = [
            RowSpec(role="tool", content=text, meta={"tool_call_id": a.call_id, "tool": a.tool, "ok": False,
                                                     "error": text})
            for a in waiting
        ]
        meta = {"interrupted": True, "errors": [{"code": GENERAL, "message": RUN_CLOSED_MESSAGE[reason]}]}
        rows.append(RowSpec(role="assistant", content="", meta=meta, is_final=True))
        run_rows_store(run=run, rows=rows)
    logger.info("paused run {} closed: {}", run_id, reason)
    return run


def paused_runs_close(*, conversation_id) -> list[Run]:
    """A new question in a conversation ends the runs in it that wait for approval."""
    ids = Run.objects.filter(conversation_id=conversation_id, status=Run.Status.AWAITING_APPROVAL).values_list(
        "id", flat=True
    )
    return [run for run in (run_paused_close(run_id=i, reason="superseded") for i in list(ids)) if run is not None]


def approvals_pending(*, run: Run) -> list[ToolApproval]:
    return list(
        ToolApproval.objects.filter(run_id=run.id, pause_seq=run.frames_seq, status=ToolApproval.Status.PENDING)
    )


def expires_at_parse(value: str) -> datetime:
    parsed = datetime.fromisoformat(value)
    return parsed if parsed.tzinfo else timezone.make_aware(parsed)
