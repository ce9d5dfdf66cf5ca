"""A run that waits for a person (docs/design.md#waiting-for-a-person): one pause, whatever it waits for.

A round whose calls need the student first — their approval, their own account at an MCP service,
their answer to what an MCP server or an A2A sub-agent asked — pauses the run: it stores the round
so far and one `Wait` row per waiting call, moves RUNNING → WAITING (chat_app.runs.state) and gives
its slot back; while it waits it belongs to no worker. Each answer is recorded on its row; the one
that completes the pause re-admits the run (a slot, the quota: `RunLease`, chat_app.runs.lease)
and claims it for the worker that took the answer, in the same transaction, so exactly one worker
resumes it. A call whose time runs out counts as declined and the supervisor resumes the run.
A stop, or no quota left at the expiry, closes it instead: its calls are stored as not run, and
its followers get their results. (A new question in its conversation is refused while it waits:
409 40905, chat_app.runs.admission.)

The kinds differ only in what the person is asked (`Wait.ask`, typed per kind below: made from
the runtime's waiting event, checked when read back, shown as the same frame again) and in the
answer each takes (`_answer_checked`). Everything else is one code path for every kind: pause
(`wait_pause_store`), decide (`wait_decide`), expire (`waits_expire`), resume (`wait_claim`),
close (`waiting_run_close`). Sync, but for `answer_open` / `ready_open` / `waiting_run_close`, which run inside the
resumed run's task (chat_app.runs.engine) and its lease.
"""
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from loguru import logger

from agents_app.access import Audience, agent_of_conversation, audience_of
from agents_app.mcp.notifications import elicitation_content_problem
from agents_app.models import Agent
from agents_app.runtime.events import (
    ApprovalRequired,
    AuthorizationRequired,
    ElicitationRequired,
    ToolResult,
    WaitingCall,
)
from audit_app.chain import Event, Outcome, audit_record
from campus_agent.base import errors
from campus_agent.base.asyncdb import db_call
from campus_agent.base.errors import GENERAL
from campus_agent.base.metrics import scrape_gauge
from campus_agent.base.text import text_clean
from chat_app.conversations.history import history_build
from chat_app.models import Message, Run, Wait
from chat_app.runs.group_limits import user_limits
from chat_app.runs.lease import RunLease
from chat_app.runs.quota import QUOTA_EXCEEDED, user_token_quota_check
from chat_app.runs.recording import RowSpec
from chat_app.runs.state import run_ended_announce, run_language, run_pause, run_resume_claim, run_waiting_close

Kind, Status = Wait.Kind, Wait.Status
ANSWER_ACTIONS = ("accept", "decline", "cancel")
RUN_CLOSED_MESSAGE = {
    "stopped": _("回答已停止。"),
    "quota": _("今天的对话额度已用完，这轮回答已结束，明天 0 点后可以再问。"),
}
CALL_CLOSED_TEXT = {
    "stopped": _("回答已停止，操作没有执行。"),
    "quota": _("今天的对话额度已用完，操作没有执行。"),
}
SERVICE_MAX = 64  # characters of a service's display name kept with its wait


# --- what each kind asks: typed, made from the runtime's event, read back checked, shown again ---

def _text(value, limit: int | None = None) -> str:
    text = text_clean(value) if isinstance(value, str) else ""
    return text[:limit] if limit else text


def _object(value) -> dict:
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class ApprovalAsk:
    """Approve or reject the call: nothing more to ask."""

    def stored(self) -> dict:
        return {}

    @classmethod
    def of(cls, waiting: ApprovalRequired) -> "ApprovalAsk":
        return cls()

    @classmethod
    def read(cls, ask: dict) -> "ApprovalAsk":
        return cls()

    def event(self, row: Wait) -> ApprovalRequired:
        return ApprovalRequired(call_id=row.call_id, tool=row.tool, args=row.args, expires_at=row.expires_at.isoformat())


@dataclass(frozen=True)
class AuthorizationAsk:
    """Connect your own account at the MCP service `service_id` (shown as `service`) at `url`, the
    authorization server's page; its callback records the yes (`authorized`)."""

    service_id: int | None
    service: str
    url: str

    def stored(self) -> dict:
        return {"service_id": self.service_id, "service": self.service, "url": self.url}

    @classmethod
    def of(cls, waiting: AuthorizationRequired) -> "AuthorizationAsk":
        return cls(service_id=waiting.service_id, service=waiting.service[:SERVICE_MAX], url=waiting.url)

    @classmethod
    def read(cls, ask: dict) -> "AuthorizationAsk":
        service_id = ask.get("service_id")
        return cls(service_id=service_id if isinstance(service_id, int) else None,
                   service=_text(ask.get("service"), SERVICE_MAX), url=_text(ask.get("url")))

    def event(self, row: Wait) -> AuthorizationRequired:
        return AuthorizationRequired(call_id=row.call_id, tool=row.tool, args=row.args, service=self.service,
                                     url=self.url, service_id=self.service_id, expires_at=row.expires_at.isoformat())


@dataclass(frozen=True)
class ElicitationAsk:
    """Answer what the call's MCP server asks: a form (`mode` "form": `message`, the JSON Schema
    `schema` of its fields, `defaults`) or a page to visit (`mode` "url": `url`)."""

    service: str
    message: str
    mode: str
    schema: dict = field(default_factory=dict)
    defaults: dict = field(default_factory=dict)
    url: str = ""

    def stored(self) -> dict:
        return {"service": self.service, "message": self.message, "mode": self.mode, "schema": self.schema,
                "defaults": self.defaults, "url": self.url}

    @classmethod
    def of(cls, waiting: ElicitationRequired) -> "ElicitationAsk":
        return cls(service=waiting.service[:SERVICE_MAX], message=waiting.message, mode=waiting.mode,
                   schema=waiting.schema, defaults=waiting.defaults, url=waiting.url)

    @classmethod
    def read(cls, ask: dict) -> "ElicitationAsk":
        return cls(service=_text(ask.get("service"), SERVICE_MAX), message=_text(ask.get("message")),
                   mode="url" if ask.get("mode") == "url" else "form", schema=_object(ask.get("schema")),
                   defaults=_object(ask.get("defaults")), url=_text(ask.get("url")))

    def event(self, row: Wait) -> ElicitationRequired:
        return ElicitationRequired(call_id=row.call_id, tool=row.tool, args=row.args, service=self.service,
                                   message=self.message, mode=self.mode, schema=self.schema, defaults=self.defaults,
                                   url=self.url, expires_at=row.expires_at.isoformat())


@dataclass(frozen=True)
class QuestionAsk:
    """Answer what the call's A2A sub-agent asks (`input-required`), a one-field form; `resume`
    (its task and context ids) goes back to the tool with the answer, so that the next run of the
    call sends it on in the same task (or, unanswered, cancels the task)."""

    service: str
    message: str
    schema: dict = field(default_factory=dict)
    resume: dict = field(default_factory=dict)

    def stored(self) -> dict:
        return {"service": self.service, "message": self.message, "schema": self.schema, "resume": self.resume}

    @classmethod
    def of(cls, waiting: ElicitationRequired) -> "QuestionAsk":
        return cls(service=waiting.service[:SERVICE_MAX], message=waiting.message, schema=waiting.schema,
                   resume=waiting.resume)

    @classmethod
    def read(cls, ask: dict) -> "QuestionAsk":
        resume = {key: _text(value) for key, value in _object(ask.get("resume")).items() if key in ("task_id", "context_id")}
        return cls(service=_text(ask.get("service"), SERVICE_MAX), message=_text(ask.get("message")),
                   schema=_object(ask.get("schema")), resume=resume)

    def event(self, row: Wait) -> ElicitationRequired:  # shown as a form, as an MCP server's question is
        return ElicitationRequired(call_id=row.call_id, tool=row.tool, args=row.args, service=self.service,
                                   message=self.message, mode="form", schema=self.schema, defaults={},
                                   expires_at=row.expires_at.isoformat())


ASKS = {Kind.APPROVAL: ApprovalAsk, Kind.AUTHORIZATION: AuthorizationAsk, Kind.ELICITATION: ElicitationAsk,
        Kind.QUESTION: QuestionAsk}
QUESTIONS = (Kind.ELICITATION, Kind.QUESTION)  # the kinds a person answers with a form


def _kind_of(waiting: WaitingCall) -> str:
    if isinstance(waiting, AuthorizationRequired):
        return Kind.AUTHORIZATION
    if isinstance(waiting, ElicitationRequired):
        return Kind.QUESTION if waiting.resume else Kind.ELICITATION  # an A2A agent's carries its task
    return Kind.APPROVAL


def wait_ask(row: Wait):
    """What the row's person is asked, typed and checked (a row edited by hand reads as harmless)."""
    return ASKS.get(row.kind, ApprovalAsk).read(_object(row.ask))


def runtime_kind(kind: str) -> str:
    """The runtime's name for what a call waited for (agents_app.runtime.loop.DecidedCall.kind): it
    knows an A2A agent's question as an elicitation whose answers carry `resume`."""
    return "elicitation" if kind == Kind.QUESTION else kind


# --- pause -------------------------------------------------------------------------------------

def expires_at_parse(value: str) -> datetime:
    parsed = datetime.fromisoformat(value)
    return parsed if parsed.tzinfo else timezone.make_aware(parsed)


def _wait_row(run: Run, frames_seq: int, waiting: WaitingCall) -> Wait:
    kind = _kind_of(waiting)
    return Wait(run_id=run.id, pause_seq=frames_seq, kind=kind, call_id=waiting.call_id, tool=waiting.tool,
                args=waiting.args, ask=ASKS[kind].of(waiting).stored(), expires_at=expires_at_parse(waiting.expires_at))


def wait_pause_store(*, run: Run, rows: list[RowSpec], waiting: list[WaitingCall], state: dict, frames_seq: int) -> bool:
    """RUNNING → WAITING: the paused round (`rows`), one pending Wait per waiting call and the
    turn's state, in one transaction. False when the run was no longer running (reaped)."""
    with transaction.atomic():
        if not run_pause(run=run, rows=rows, state=state, frames_seq=frames_seq):
            return False
        Wait.objects.bulk_create(_wait_row(run, frames_seq, w) for w in waiting)
    return True


def _current(run: Run):
    return Wait.objects.filter(run_id=run.id, pause_seq=run.frames_seq)


def waiting_frames(*, run: Run) -> list[dict]:
    """The `approval_required`, `authorization_required` and `elicitation_required` payloads of the
    waiting run's pending calls, rebuilt from their rows (for a follower without its log)."""
    if run.status != Run.Status.WAITING:
        return []
    return [wait_ask(row).event(row).frame() for row in _current(run).filter(status=Status.PENDING)]


def authorization_waiting_calls(*, user_id: int, service_id: int) -> list[tuple]:
    """(run id, call id) of every call of the student's waiting runs that waits for their
    authorization of the service: what an authorization just given lets go on."""
    return list(
        Wait.objects.filter(kind=Kind.AUTHORIZATION, status=Status.PENDING, ask__service_id=service_id,
                            run__user_id=user_id, run__status=Run.Status.WAITING, expires_at__gt=timezone.now())
        .order_by("run_id", "created_at").values_list("run_id", "call_id")
    )


# --- decide --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Resumption:
    """A run this worker claimed to resume, with what its turn needs."""

    run: Run
    agent: Agent
    history: list[dict]
    state: dict
    decided: list[Wait]
    # call id → every answer the student gave that call's questions, in order (with `resume`).
    answers: dict[str, tuple[dict, ...]]
    audience: Audience  # the student's groups, read again: the tools their groups allow now


@dataclass(frozen=True)
class Decision:
    """What one answer came to: the call's row; the resumption when it completed the pause (this
    worker claimed the run); `late` when the call's time had run out (it counts as expired)."""

    wait: Wait
    resumption: Resumption | None = None
    late: bool = False


class WaitRefused(Exception):
    """The answer cannot be taken: `reason` is "not_waiting", "no_call", "decided" (`status`: what
    the call had come to), "authorize" (a call waiting for the student's account is approved by the
    authorization itself, not by a decision: it can only be declined), "answer_needed" (a question
    is answered, not approved), "no_question" (an answer to a call that asked nothing) or "answer"
    (`problem`: the answer does not fit the form)."""

    def __init__(self, reason: str, status: str | None = None, problem: str | None = None):
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.problem = problem


def _answer_checked(row: Wait, *, approve: bool, authorized: bool, answer: dict | None) -> tuple[bool, dict | None]:
    """(approved, the answer stored) for the person's answer to `row`, by its kind. Raises WaitRefused."""
    if approve and row.kind == Kind.AUTHORIZATION and not authorized:
        raise WaitRefused("authorize")
    if row.kind not in QUESTIONS:
        if answer is not None:
            raise WaitRefused("no_question")
        return approve, None
    if answer is None:
        if approve:
            raise WaitRefused("answer_needed")
        return False, {"action": "decline"}
    if answer.get("action") != "accept":
        return False, {"action": answer.get("action")}
    ask = wait_ask(row)
    if getattr(ask, "mode", "form") == "url":
        return True, {"action": "accept"}
    problem = elicitation_content_problem(ask.schema, answer.get("content"))
    if problem is not None:
        raise WaitRefused("answer", problem=problem)
    return True, {"action": "accept", "content": answer["content"]}


def _readmit(run: Run, lease: RunLease) -> None:
    """A run that goes on is admitted as a new turn would be (not counted in the message rate: an
    answer is not a new message): a free slot (429 42901) and the daily quota (429 42904)."""
    lease.refuse_unless_held()
    user_token_quota_check(user_id=run.user_id, quota=user_limits(user_id=run.user_id).daily_token_quota)


def _decision_audited(run: Run, row: Wait, *, authorized: bool) -> None:
    """The decision's audit row, in its transaction (docs/design.md#campus-identity-and-audit)."""
    audit_record(
        event=Event.APPROVAL_DECISION,
        outcome=Outcome.REFUSED if row.status == Status.EXPIRED else Outcome.OK,
        actor=run.user,
        target=f"run:{run.id} call:{row.call_id}"[:255],
        details={"decision": row.status, "tool": row.tool, "kind": row.kind, "authorized": authorized},
    )


def wait_decide(*, run_id, call_id: str, approve: bool, lease: RunLease, authorized: bool = False,
                answer: dict | None = None) -> Decision:
    """Records one answer to a call of the run's current pause, in one transaction that first
    takes the run's row (concurrent answers to one run go one after the other). When it is the last
    pending call the run is re-admitted on `lease` (429 ApiError when refused, and then nothing is
    recorded: the run stays waiting) and claimed for this worker. `authorized`: the answer is the
    authorization server's callback, the student's account connected; `answer`: ({action, content})
    to a question, approved when accepted. Raises WaitRefused."""
    now = timezone.now()
    with transaction.atomic():
        # A write first: the row lock (PostgreSQL) or the write lock (SQLite, IMMEDIATE) orders this
        # answer after any other on the same run.
        if not Run.objects.filter(id=run_id, status=Run.Status.WAITING).update(heartbeat_at=now):
            raise WaitRefused("not_waiting")
        run = Run.objects.select_related("user").get(id=run_id)
        row = _current(run).filter(call_id=call_id).first()
        if row is None:
            raise WaitRefused("no_call")
        if row.status != Status.PENDING:
            raise WaitRefused("decided", row.status)
        approved, stored = _answer_checked(row, approve=approve, authorized=authorized, answer=answer)
        if row.expires_at <= now:  # too late: it counts as expired now, whoever saw it first
            row.status, row.decided_at = Status.EXPIRED, now
            row.save(update_fields=["status", "decided_at"])
            _decision_audited(run, row, authorized=authorized)
            return Decision(wait=row, late=True)
        last = not _current(run).filter(status=Status.PENDING).exclude(id=row.id).exists()
        if last:
            _readmit(run, lease)
        row.status, row.decided_at, row.answer = Status.APPROVED if approved else Status.REJECTED, now, stored
        row.save(update_fields=["status", "decided_at", "answer"])
        _decision_audited(run, row, authorized=authorized)
        resumption = _claim(run, lease) if last else None
    logger.info("wait run={} call={} tool={} kind={} {}", run_id, call_id, row.tool, row.kind, row.status)
    return Decision(wait=row, resumption=resumption)


# --- expire, resume --------------------------------------------------------------------------------

def waits_expire() -> list[tuple]:
    """Marks every pending call past its deadline expired; (run id, user id) of the waiting runs
    that now have no pending call (to be resumed: their time ran out, or their last answer could
    not claim them)."""
    now = timezone.now()
    Wait.objects.filter(status=Status.PENDING, expires_at__lte=now).update(status=Status.EXPIRED, decided_at=now)
    return list(
        Run.objects.filter(status=Run.Status.WAITING).exclude(waits__status=Status.PENDING)
        .values_list("id", "user_id")
    )


def wait_claim(*, run_id, lease: RunLease) -> Resumption | None:
    """Claims a waiting run whose calls are all answered (or expired) for this worker, re-admitted
    on `lease` (429 ApiError when refused); None when a call still waits or another worker claimed
    it first."""
    with transaction.atomic():
        if not Run.objects.filter(id=run_id, status=Run.Status.WAITING).update(heartbeat_at=timezone.now()):
            return None
        run = Run.objects.get(id=run_id)
        if _current(run).filter(status=Status.PENDING).exists():
            return None
        _readmit(run, lease)
        return _claim(run, lease)


def _claim(run: Run, lease: RunLease) -> Resumption:
    if not run_resume_claim(run_id=run.id, slot_key=lease.key):  # the caller holds the row: cannot happen
        raise RuntimeError(f"run {run.id} left WAITING while its row was held")
    run = Run.objects.select_related("conversation", "user").get(id=run.id)
    audience = audience_of(user=run.user)
    agent = agent_of_conversation(audience=audience, agent_id=run.conversation.agent_id)
    if agent is None:  # every agent the student may use disabled while the run waited
        raise errors.ApiError(errors.MSG_NO_AGENT, code=GENERAL, status=503)
    decided = list(_current(run).order_by("created_at", "id"))
    return Resumption(
        run=run,
        agent=agent,
        history=history_build(conversation=run.conversation, limit=_history_limit(run), images=agent.reads_images()),
        state=run.resume_state or {},
        decided=decided,
        # Every waiting call's, whatever it waits for now: a call that answered its server's question
        # and then needs the student's account hands the server the same answer when it runs.
        answers=_answers(run, [w.call_id for w in decided]),
        audience=audience,
    )


def _answers(run: Run, call_ids: list[str]) -> dict[str, tuple[dict, ...]]:
    """Every answer the student gave the questions of these calls, this pause's and earlier ones'."""
    if not call_ids:
        return {}
    answers: dict[str, list[dict]] = {}
    for row in Wait.objects.filter(run_id=run.id, call_id__in=call_ids, kind__in=QUESTIONS).order_by("pause_seq"):
        resume = getattr(wait_ask(row), "resume", None)  # what the tool needs to go on (an A2A task)
        answer = row.answer
        if answer is None and resume and row.status == Status.EXPIRED:
            answer = {"action": "cancel"}  # the tool ends what waited (an A2A agent's task is cancelled)
        if answer is not None:
            answers.setdefault(row.call_id, []).append({**answer, "resume": resume} if resume else answer)
    return {call_id: tuple(given) for call_id, given in answers.items()}


def _history_limit(run: Run) -> int:
    """What a turn that had not paused would send: MAX_HISTORY rows up to its question, then the
    rows this run stored since (its rounds, which a running turn keeps in memory)."""
    own = Message.objects.filter(conversation_id=run.conversation_id, request_id=run.request_id).count()
    return settings.MAX_HISTORY + max(own - 1, 0)


# --- close --------------------------------------------------------------------------------------

def _close_rows(run: Run, reason: str) -> list[RowSpec]:
    """The rows that end a waiting run without resuming it (in its student's language): its
    waiting calls cancelled and stored as not run (a conversation never holds a call without its
    result), then the reply so far, interrupted."""
    waiting = list(_current(run).order_by("created_at", "id"))
    Wait.objects.filter(run_id=run.id, status=Status.PENDING).update(status=Status.CANCELLED, decided_at=timezone.now())
    with run_language(run):
        text, closed = str(CALL_CLOSED_TEXT[reason]), str(RUN_CLOSED_MESSAGE[reason])
    calls = [RowSpec(role="tool", content=text, meta={"tool_call_id": w.call_id, "tool": w.tool, "ok": False,
                                                        "error": text}) for w in waiting]
    meta = {"interrupted": True, "errors": [{"code": GENERAL, "message": closed}]}
    return [*calls, RowSpec(role="assistant", content="", meta=meta, is_final=True)]


def waiting_run_end(*, run_id, reason: str) -> tuple[Run, list[dict]] | None:
    """WAITING → INTERRUPTED: a stop, or no quota left when its calls expired. The run and a
    `tool_result` frame for each call it stored as not run (a follower never sees a `tool_call`
    left without its result); None when it was not waiting."""
    rows: list[RowSpec] = []

    def rows_for(run: Run) -> list[RowSpec]:
        rows.extend(_close_rows(run, reason))
        return rows

    run = run_waiting_close(run_id=run_id, rows_for=rows_for)
    if run is None:
        return None
    return run, [ToolResult(call_id=row.meta["tool_call_id"], tool=row.meta["tool"], ok=False, content=row.content,
                            error=row.content).frame() for row in rows if row.role == "tool"]


async def waiting_run_close(*, run_id, reason: str) -> bool:
    """Ends a waiting run (waiting_run_end) and gives its followers its calls' results and its end;
    False when it was not waiting."""
    closed = await db_call(waiting_run_end, run_id=run_id, reason=reason)
    if closed is None:
        return False
    run, results = closed
    await run_ended_announce(run, closing=results)
    return True


# --- the resumed run's opening, inside its task and its lease (chat_app.runs.engine) ----------------

async def answer_open(lease: RunLease, *, run: Run, call_id: str, approve: bool, authorized: bool = False,
                      answer: dict | None = None) -> tuple[Decision, Resumption | None]:
    """Records the answer; the one that completes the pause resumes the run on `lease`. An answer
    that came too late leaves the run to go on without it, at once, as the supervisor would."""
    decision = await db_call(wait_decide, run_id=run.id, call_id=call_id, approve=approve, lease=lease,
                             authorized=authorized, answer=answer)
    if decision.late:
        return decision, await ready_open(lease, run_id=run.id)
    return decision, decision.resumption


async def ready_open(lease: RunLease, *, run_id) -> Resumption | None:
    """Claims a waiting run whose answers are in (or whose time ran out). A student with no free
    slot: it waits for the next sweep. Over the daily quota: it cannot go on today, and is closed
    (its calls stored as not run, its followers given its end)."""
    try:
        return await db_call(wait_claim, run_id=run_id, lease=lease)
    except errors.ApiError as refused:
        if refused.code == QUOTA_EXCEEDED:
            await waiting_run_close(run_id=run_id, reason="quota")
        return None


# --- metrics -------------------------------------------------------------------------------------

def _waiting_count():
    yield {}, Wait.objects.filter(status=Status.PENDING).count()


def metrics_register() -> None:
    """The scrape-time gauge of the calls waiting for a student, read from the database when
    /metrics is asked for (campus_agent.base.metrics)."""
    scrape_gauge("campus_agent_approvals_waiting", "Tool calls waiting for a student's approval", _waiting_count)
