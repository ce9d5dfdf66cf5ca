"""A run that waits for a person (DESIGN §4a): one pause, whatever it waits for.

A waiting run is WAITING with a `pause_kind`; each kind (today the approval of ask-first tool
calls, chat_app.services.approvals; next a form answer for an MCP elicitation, an account
consent for a per-student MCP OAuth, a sub-agent's follow-up question) says in one `PauseKind`
how its waiting cards are rebuilt for a follower that has no log of the run, which waiting runs
are ready to go on (answered, or their time ran out), how one is claimed to resume, and what an
unanswered pause stores when the run is ended instead. Everything else — the move to WAITING and
back, the slot given back and taken again with the quota, the expiry sweep, the close on stop or
on a new question, the followers — is the same for every kind (chat_app.runs.lifecycle).
"""
from collections.abc import Callable
from dataclasses import dataclass

from django.utils.translation import gettext_lazy as _

from campus_agent.base.errors import GENERAL
from chat_app.models import Run
from chat_app.services import approvals
from chat_app.services.recording import RowSpec
from chat_app.services.runs import run_language, run_waiting_close

RUN_CLOSED_MESSAGE = {
    "stopped": _("回答已停止。"),
    "superseded": _("等待学生操作时学生发送了新消息，这轮回答已结束。"),
    "quota": _("今天的对话额度已用完，这轮回答已结束，明天 0 点后可以再问。"),
}


@dataclass(frozen=True)
class PauseKind:
    waiting_frames: Callable[[Run], list[dict]]  # the frames that show what it waits for
    ready: Callable[[], list]  # ids of waiting runs of this kind that can go on now
    resume_claim: Callable[..., "approvals.Resumption | None"]  # (run_id=, lease_take=)
    close_rows: Callable[[Run, str], list[RowSpec]]  # (run, reason) → rows before the reply's


PAUSE_KINDS: dict[str, PauseKind] = {
    Run.PauseKind.APPROVAL: PauseKind(
        waiting_frames=approvals.approval_waiting_frames,
        ready=approvals.approvals_expire,
        resume_claim=approvals.approval_resume_claim,
        close_rows=approvals.approval_close_rows,
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
