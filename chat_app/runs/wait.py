"""The approval pause (DESIGN §4a): a run waits until the student decides on its ask-first calls.

While it waits it belongs to no worker: its row is WAITING (pause_kind `approval`) with no worker
and no slot, its finished rows are stored, each waiting call has a ToolApproval row, and
`resume_state` holds what the turn had. The decision that completes the pause (or the
supervisor, once the calls expire) claims the run in the same transaction, holding a fresh slot
lease and having passed the daily quota like a new turn, so exactly one worker resumes it. Sync;
the event loop's side is chat_app.runs.lifecycle.
"""
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from loguru import logger

from agents_app.catalog_cache import catalog_snapshot
from agents_app.mcp.notifications import elicitation_content_problem
from agents_app.models import Agent
from agents_app.runtime.events import ApprovalRequired, AuthorizationRequired, ElicitationRequired, WaitingCall
from campus_agent.base import errors
from campus_agent.base.errors import GENERAL
from campus_agent.base.metrics import scrape_gauge
from chat_app.conversations.history import history_build
from chat_app.models import Message, Run, ToolApproval
from chat_app.runs.lease import SlotLease
from chat_app.runs.recording import RowSpec
from chat_app.runs.state import run_language, run_pause, run_resume_claim, run_waiting_close

KIND = Run.PauseKind.APPROVAL
APPROVAL_CANCELLED_TEXT = {
    "stopped": _("回答已停止，操作没有执行。"),
    "superseded": _("学生发送了新消息，操作没有执行。"),
    "quota": _("今天的对话额度已用完，操作没有执行。"),
}


@dataclass(frozen=True)
class Resumption:
    """A run this worker claimed to resume, with what its turn needs."""

    run: Run
    agent: Agent
    history: list[dict]
    state: dict
    decided: list[ToolApproval]
    lease: SlotLease  # taken for it: the resumed run releases it when it ends
    # call id → every answer the student gave that call's questions (elicitations), in order.
    answers: dict[str, tuple[dict, ...]]


@dataclass(frozen=True)
class Decision:
    """What one decision came to: the call's row; the resumption when it was the last decision
    (this worker claimed the run); `late` when the call's time had run out (it counts as
    expired, and the run may go on without it)."""

    approval: ToolApproval
    resumption: Resumption | None = None
    late: bool = False


class ApprovalRefused(Exception):
    """The decision cannot be taken: `reason` is "not_waiting", "no_call", "decided" (`status`:
    what the call had come to), "authorize" (a call waiting for an authorization is approved
    by the authorization itself, not by a decision; it can only be declined), "answer_needed" (a
    call waiting for the answer to its server's question is answered, not approved), "no_question"
    (an answer to a call that asked nothing) or "answer" (`problem`: the answer does not fit
    the form)."""

    def __init__(self, reason: str, status: str | None = None, problem: str | None = None):
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.problem = problem


ANSWER_ACTIONS = ("accept", "decline", "cancel")


def _answer_checked(approval: ToolApproval, *, approve: bool, answer: dict | None) -> dict | None:
    """The answer stored for the call (None for a call that asked nothing): for a question, the
    student's `answer` ({action, content}) checked against its form, or, for a plain rejection,
    a decline. Raises ApprovalRefused."""
    if approval.kind != ToolApproval.Kind.ELICITATION:
        if answer is not None:
            raise ApprovalRefused("no_question")
        return None
    if answer is None:
        if approve:
            raise ApprovalRefused("answer_needed")
        return {"action": "decline"}
    if answer.get("action") != "accept":
        return {"action": answer.get("action")}
    question = approval.question or {}
    if question.get("mode") == "url":
        return {"action": "accept"}
    problem = elicitation_content_problem(question.get("schema") or {}, answer.get("content"))
    if problem is not None:
        raise ApprovalRefused("answer", problem=problem)
    return {"action": "accept", "content": answer["content"]}


def expires_at_parse(value: str) -> datetime:
    parsed = datetime.fromisoformat(value)
    return parsed if parsed.tzinfo else timezone.make_aware(parsed)


def _waiting_row(run: Run, frames_seq: int, waiting: WaitingCall) -> ToolApproval:
    row = ToolApproval(run_id=run.id, pause_seq=frames_seq, call_id=waiting.call_id, tool=waiting.tool,
                       args=waiting.args, expires_at=expires_at_parse(waiting.expires_at))
    if isinstance(waiting, AuthorizationRequired):
        row.kind, row.mcp_service_id = ToolApproval.Kind.AUTHORIZATION, waiting.service_id
        row.service_label, row.url = waiting.service[:64], waiting.url
    elif isinstance(waiting, ElicitationRequired):
        row.kind, row.service_label, row.url = ToolApproval.Kind.ELICITATION, waiting.service[:64], waiting.url
        row.question = {"message": waiting.message, "mode": waiting.mode, "schema": waiting.schema,
                        "defaults": waiting.defaults, "resume": waiting.resume}
    return row


def approval_pause_store(*, run: Run, rows: list[RowSpec], waiting: list[WaitingCall],
                         state: dict, frames_seq: int) -> bool:
    """RUNNING → WAITING: the paused round (`rows`), one pending ToolApproval per waiting call (an
    approval, or the authorization of a service) and the turn's state, in one transaction. False
    when the run was no longer running (reaped)."""
    with transaction.atomic():
        if not run_pause(run=run, kind=KIND, rows=rows, state=state, frames_seq=frames_seq):
            return False
        ToolApproval.objects.bulk_create(_waiting_row(run, frames_seq, w) for w in waiting)
    return True


def _current(run: Run):
    return ToolApproval.objects.filter(run_id=run.id, pause_seq=run.frames_seq)


def approval_decide(*, run_id, call_id: str, approve: bool, lease_take: Callable[[Run], SlotLease],
                    authorized: bool = False, answer: dict | None = None) -> Decision:
    """Records one decision on a call of the run's current pause, in one transaction that first
    takes the run's row (concurrent decisions on one run go one after the other). When it is the
    last pending call, `lease_take(run)` admits the resumed run (a slot, the quota; it raises the
    429 ApiError when refused, and then nothing is recorded: the run stays waiting) and the run is
    claimed for this worker. A call waiting for an authorization is approved only with
    `authorized` (the authorization server's callback, once the tokens are stored); one waiting
    for the answer to its server's question takes `answer` ({action, content}: approved when
    accepted, rejected when declined or cancelled; either way its server is given the answer).
    Raises ApprovalRefused."""
    now = timezone.now()
    lease = None
    try:
        with transaction.atomic():
            # A write first: the row lock (PostgreSQL) or the write lock (SQLite, IMMEDIATE)
            # orders this decision after any other on the same run.
            if not Run.objects.filter(id=run_id, status=Run.Status.WAITING, pause_kind=KIND).update(heartbeat_at=now):
                raise ApprovalRefused("not_waiting")
            run = Run.objects.get(id=run_id)
            approval = _current(run).filter(call_id=call_id).first()
            if approval is None:
                raise ApprovalRefused("no_call")
            if approval.status != ToolApproval.Status.PENDING:
                raise ApprovalRefused("decided", approval.status)
            if approve and approval.kind == ToolApproval.Kind.AUTHORIZATION and not authorized:
                raise ApprovalRefused("authorize")
            stored_answer = _answer_checked(approval, approve=approve, answer=answer)
            if stored_answer is not None:
                approve = stored_answer["action"] == "accept"
            if approval.expires_at <= now:  # too late: it counts as expired now, whoever saw it first
                approval.status, approval.decided_at = ToolApproval.Status.EXPIRED, now
                approval.save(update_fields=["status", "decided_at"])
                return Decision(approval=approval, late=True)
            last = not _current(run).filter(status=ToolApproval.Status.PENDING).exclude(id=approval.id).exists()
            if last:
                lease = lease_take(run)
            approval.status = ToolApproval.Status.APPROVED if approve else ToolApproval.Status.REJECTED
            approval.decided_at, approval.answer = now, stored_answer
            approval.save(update_fields=["status", "decided_at", "answer"])
            resumption = _claim(run, lease) if last else None
    except BaseException:
        if lease is not None:
            lease.release_now()
        raise
    logger.info("approval run={} call={} tool={} {}", run_id, call_id, approval.tool, approval.status)
    return Decision(approval=approval, resumption=resumption)


def approvals_expire() -> list:
    """Marks every pending call past its deadline expired; the ids of the waiting runs that now
    have no pending call (to be resumed: their time ran out, or their last decision could not
    claim them)."""
    now = timezone.now()
    ToolApproval.objects.filter(status=ToolApproval.Status.PENDING, expires_at__lte=now).update(
        status=ToolApproval.Status.EXPIRED, decided_at=now
    )
    return list(
        Run.objects.filter(status=Run.Status.WAITING, pause_kind=KIND)
        .exclude(approvals__status=ToolApproval.Status.PENDING)
        .values_list("id", flat=True)
    )


def approval_resume_claim(*, run_id, lease_take: Callable[[Run], SlotLease]) -> Resumption | None:
    """Claims a waiting run whose calls are all decided (or expired), for this worker; None when
    a call still waits or another worker claimed it first. `lease_take` as in approval_decide."""
    lease = None
    try:
        with transaction.atomic():
            if not Run.objects.filter(id=run_id, status=Run.Status.WAITING, pause_kind=KIND).update(
                heartbeat_at=timezone.now()
            ):
                return None
            run = Run.objects.get(id=run_id)
            if _current(run).filter(status=ToolApproval.Status.PENDING).exists():
                return None
            lease = lease_take(run)
            return _claim(run, lease)
    except BaseException:
        if lease is not None:
            lease.release_now()
        raise


def _claim(run: Run, lease: SlotLease) -> Resumption:
    if not run_resume_claim(run_id=run.id, lease=lease):  # the caller holds the row: cannot happen
        raise RuntimeError(f"run {run.id} left WAITING while its row was held")
    run = Run.objects.select_related("conversation").get(id=run.id)
    agent = catalog_snapshot().agent_of(agent_id=run.conversation.agent_id)
    if agent is None:  # every agent disabled while the run waited
        raise errors.ApiError(errors.MSG_NO_AGENT, code=GENERAL, status=503)
    decided = list(_current(run).order_by("created_at", "id"))
    return Resumption(
        run=run,
        agent=agent,
        history=history_build(conversation=run.conversation, limit=_history_limit(run), images=agent.reads_images()),
        state=run.resume_state or {},
        decided=decided,
        lease=lease,
        # Every waiting call's, whatever it waits for now: a call that answered its server's question
        # and then needs the student's account hands the server the same answer when it runs.
        answers=_answers(run, [a.call_id for a in decided]),
    )


def _answers(run: Run, call_ids: list[str]) -> dict[str, tuple[dict, ...]]:
    """Every answer the student gave the questions of these calls, this pause's and earlier ones'."""
    if not call_ids:
        return {}
    answers: dict[str, list[dict]] = {}
    for call_id, answer, question, status in (
        ToolApproval.objects.filter(run_id=run.id, call_id__in=call_ids, kind=ToolApproval.Kind.ELICITATION)
        .order_by("pause_seq").values_list("call_id", "answer", "question", "status")
    ):
        resume = (question or {}).get("resume")  # what the tool needs to go on (an A2A task)
        if answer is None and resume and status == ToolApproval.Status.EXPIRED:
            answer = {"action": "cancel"}  # the tool ends what waited (an A2A agent's task is cancelled)
        if answer is not None:
            answers.setdefault(call_id, []).append({**answer, "resume": resume} if resume else answer)
    return {call_id: tuple(given) for call_id, given in answers.items()}


def _history_limit(run: Run) -> int:
    """What a turn that had not paused would send: MAX_HISTORY rows up to its question, then
    the rows this run stored since (its rounds, which a running turn keeps in memory)."""
    own = Message.objects.filter(conversation_id=run.conversation_id, request_id=run.request_id).count()
    return settings.MAX_HISTORY + max(own - 1, 0)


def approval_close_rows(run: Run, reason: str) -> list[RowSpec]:
    """The rows that end a waiting run without resuming it: its waiting calls cancelled and
    stored as not run (a conversation never holds a call without its result)."""
    waiting = list(_current(run).order_by("created_at", "id"))
    ToolApproval.objects.filter(run_id=run.id, status=ToolApproval.Status.PENDING).update(
        status=ToolApproval.Status.CANCELLED, decided_at=timezone.now()
    )
    text = str(APPROVAL_CANCELLED_TEXT[reason])  # in the run's language (pauses.waiting_run_close)
    return [
        RowSpec(role="tool", content=text, meta={"tool_call_id": a.call_id, "tool": a.tool, "ok": False, "error": text})
        for a in waiting
    ]


def _waiting_frame(row: ToolApproval) -> dict:
    if row.kind == ToolApproval.Kind.ELICITATION:
        question = row.question or {}
        return ElicitationRequired(call_id=row.call_id, tool=row.tool, args=row.args, service=row.service_label,
                                   message=question.get("message", ""), mode=question.get("mode", "form"),
                                   schema=question.get("schema") or {}, defaults=question.get("defaults") or {},
                                   url=row.url, expires_at=row.expires_at.isoformat()).frame()
    if row.kind == ToolApproval.Kind.AUTHORIZATION:
        return AuthorizationRequired(call_id=row.call_id, tool=row.tool, args=row.args, service=row.service_label,
                                     url=row.url, expires_at=row.expires_at.isoformat()).frame()
    return ApprovalRequired(call_id=row.call_id, tool=row.tool, args=row.args, expires_at=row.expires_at.isoformat()).frame()


def approval_waiting_frames(run: Run) -> list[dict]:
    """The `approval_required`, `authorization_required` and `elicitation_required` payloads of
    the run's pending calls, rebuilt from their rows."""
    return [_waiting_frame(a) for a in _current(run).filter(status=ToolApproval.Status.PENDING)]


def authorization_waiting_calls(*, user_id: int, service_id: int) -> list[tuple]:
    """(run id, call id) of every call of the student's waiting runs that waits for their
    authorization of the service: what an authorization just given lets go on."""
    return list(
        ToolApproval.objects.filter(kind=ToolApproval.Kind.AUTHORIZATION, status=ToolApproval.Status.PENDING,
                                    mcp_service_id=service_id, run__user_id=user_id, run__status=Run.Status.WAITING,
                                    expires_at__gt=timezone.now())
        .order_by("run_id", "created_at").values_list("run_id", "call_id")
    )


# --- pauses ------------------------------------------------------------
# A run that waits for a person (DESIGN §4a): one pause, whatever it waits for.
#
# A waiting run is WAITING with a `pause_kind`; each kind (today the approval of ask-first tool
# calls, chat_app.runs.wait; next a form answer for an MCP elicitation, an account
# consent for a per-student MCP OAuth, a sub-agent's follow-up question) says in one `PauseKind`
# how its waiting cards are rebuilt for a follower that has no log of the run, which waiting runs
# are ready to go on (answered, or their time ran out), how one is claimed to resume, and what an
# unanswered pause stores when the run is ended instead. Everything else — the move to WAITING and
# back, the slot given back and taken again with the quota, the expiry sweep, the close on stop or
# on a new question, the followers — is the same for every kind (chat_app.runs.lifecycle).
#

RUN_CLOSED_MESSAGE = {
    "stopped": _("回答已停止。"),
    "superseded": _("等待学生操作时学生发送了新消息，这轮回答已结束。"),
    "quota": _("今天的对话额度已用完，这轮回答已结束，明天 0 点后可以再问。"),
}


@dataclass(frozen=True)
class PauseKind:
    waiting_frames: Callable[[Run], list[dict]]  # the frames that show what it waits for
    ready: Callable[[], list]  # ids of waiting runs of this kind that can go on now
    resume_claim: Callable[..., "Resumption | None"]  # (run_id=, lease_take=)
    close_rows: Callable[[Run, str], list[RowSpec]]  # (run, reason) → rows before the reply's


PAUSE_KINDS: dict[str, PauseKind] = {
    Run.PauseKind.APPROVAL: PauseKind(
        waiting_frames=approval_waiting_frames,
        ready=approvals_expire,
        resume_claim=approval_resume_claim,
        close_rows=approval_close_rows,
    ),
}


def waiting_frames(*, run: Run) -> list[dict]:
    """What the waiting run asks, as frame payloads (for a follower without its log)."""
    kind = PAUSE_KINDS.get(run.pause_kind)
    return kind.waiting_frames(run) if kind is not None else []


def waiting_runs_ready() -> list[tuple[str, object]]:
    """(kind, run id) of every waiting run that can go on now."""
    return [(name, run_id) for name, kind in PAUSE_KINDS.items() for run_id in kind.ready()]


def waiting_run_close(*, run_id, reason: str) -> Run | None:
    """WAITING → INTERRUPTED (a stop, or a new question in its conversation): what it waited for
    stored as not done, the reply so far as interrupted. None when it was not waiting."""

    def rows_for(run: Run) -> list[RowSpec]:
        with run_language(run):
            kind = PAUSE_KINDS.get(run.pause_kind)
            rows = kind.close_rows(run, reason) if kind is not None else []
            meta = {"interrupted": True, "errors": [{"code": GENERAL, "message": str(RUN_CLOSED_MESSAGE[reason])}]}
        return [*rows, RowSpec(role="assistant", content="", meta=meta, is_final=True)]

    return run_waiting_close(run_id=run_id, rows_for=rows_for)


def waiting_runs_close(*, conversation_id) -> list[Run]:
    """A new question in a conversation ends the runs in it that wait for a person."""
    ids = list(Run.objects.filter(conversation_id=conversation_id, status=Run.Status.WAITING).values_list("id", flat=True))
    return [run for run in (waiting_run_close(run_id=i, reason="superseded") for i in ids) if run is not None]


# --- metrics ------------------------------------------------------------
# Scrape-time gauges of the runs (campus_agent.base.metrics): tool calls waiting for a student's
# approval, read from the database when /metrics is asked for.

def _approvals_waiting():
    yield {}, ToolApproval.objects.filter(status=ToolApproval.Status.PENDING).count()


def metrics_register() -> None:
    scrape_gauge("campus_agent_approvals_waiting", "Tool calls waiting for a student's approval", _approvals_waiting)
