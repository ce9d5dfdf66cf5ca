"""The run on this worker: its task, from its admission to its end, and the moves that start, resume,
stop or reap one (docs/design.md#runs).

    run_start          a new turn: admitted inside its lease → RUNNING here (RunTask)
    run_answer         WAITING, an answer → recorded; the last one re-admits it → RUNNING here
    runs_resume_ready  WAITING, answers in or time out → RUNNING here (the supervisor's sweep)
    run_stop           RUNNING here → cancelled; RUNNING elsewhere → asked over the bus (or reaped
                       when its worker is dead); WAITING → INTERRUPTED; ended → nothing
    runs_reap_stale    RUNNING, worker dead → INTERRUPTED (the supervisor's sweep)

A `RunTask` is the run: `async with` its lease (chat_app.runs.lease), it runs its opening — a new
turn's admission (chat_app.runs.admission) or a waiting run's re-admission (chat_app.runs.wait) —
then the turn, keeping its record (`TurnRecorder`), storing each finished tool round as it
finishes and handing its unsaved text to the worker's supervisor for the 2-second checkpoints,
then stores its end: the reply (partial and marked interrupted when it was stopped, cut by a
failure or by the budget), or its pause when it waits for a person. Leaving the lease gives the
slot back, once, whatever happened; then it announces that end (`done`, or what it waits for).
Whoever opened it awaits `opened`: the opening's outcome, or its refusal (an ApiError, and
nothing was stored). Every event is a numbered SSE frame written to the run bus (runs.bus);
clients only follow that (runs.follow). The database side of each move is chat_app.runs.state.

It runs in its own task, not in a response generator: the generator belongs to one client and
is cancelled when that client goes away; the run is cancelled only by `stop()`.
"""
import asyncio
import dataclasses
import enum
import functools
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing, suppress
from dataclasses import dataclass
from datetime import timedelta

from asgiref.sync import ThreadSensitiveContext
from django.conf import settings
from django.utils import translation
from django.utils.translation import gettext_lazy as _
from loguru import logger

from agents_app.models import Agent
from agents_app.runtime.context import RunContext
from agents_app.runtime.events import Chunk, Done, Error, Event, Moderation, Paused, Reasoning, ToolCall, ToolResult
from agents_app.runtime.loop import DecidedCall
from agents_app.runtime.tracing import run_span
from agents_app.runtime.turn import turn_resume_stream, turn_stream
from campus_agent.base.asyncdb import db_call, turn_sync_executor
from campus_agent.base.errors import DOWNSTREAM, GENERAL
from campus_agent.base.group_commit import GroupCommit
from campus_agent.base.metrics import ACTIVE_RUNS, FIRST_CHUNK, run_counted
from campus_agent.base.redaction import clip_text
from campus_agent.base.request_id import request_id_set
from campus_agent.base.sse import sse_frame
from campus_agent.base.tasks import background
from chat_app.accounts.authentication import Caller
from chat_app.models import Run
from chat_app.runs.admission import TurnStart, turn_open
from chat_app.runs.bus import run_bus
from chat_app.runs.chat_input import ChatInput
from chat_app.runs.lease import RunLease
from chat_app.runs.moderation import blocked_answer, moderation_audit, notices_first
from chat_app.runs.recording import TOOL_CUT_MESSAGE, TurnRecorder
from chat_app.runs.state import (
    Finish,
    local_runs,
    run_ended_announce,
    run_finish,
    run_is_stale,
    run_reap,
    run_refresh,
    run_rows_store,
    run_store_failed_mark,
    runs_finish,
    runs_reap,
)
from chat_app.runs.turn_log import (
    BLOCKED,
    CANCELLED,
    ERROR,
    FALLBACK,
    INTERRUPTED,
    OK,
    PAUSED,
    STOPPED,
    TurnEnd,
    turn_end_log,
)
from chat_app.runs.wait import (
    Decision,
    Resumption,
    answer_open,
    ready_open,
    runtime_kind,
    wait_pause_store,
    waiting_run_close,
    waits_expire,
)

TURN_BUDGET_MESSAGE = _("本轮回答超出时间限制，已中断。")
TURN_FAILED_MESSAGE = _("服务内部错误，回答已中断，请稍后重试。")
STORE_FAILED_MESSAGE = _("回答保存失败，刷新后可能看不到这条回答。")
STORE_PARTIAL_MESSAGE = _("回答未能完整保存：只保存了回答的文字，工具结果等没有保存。")
FRAME_FAILED_MESSAGE = _("回答中有无法发送的内容，已中断。")

# The runtime enforces TURN_BUDGET_SEC itself, step by step; this outer cut is the backstop for
# whatever it might not bound (a path that overruns its own deadline), so it fires a little later.
BUDGET_BACKSTOP_SEC = 1.0
CHUNK_COALESCE_SEC = 0.025
SETTLE_WAIT_SEC = 5.0  # how long a stop waits for a run that is storing its end
# The ends of runs that come together (a burst's answers end in step) are stored together: one
# crossing and one transaction for the group, each run its own outcome (campus_agent.base.group_commit).
FINISHES: GroupCommit[Finish, bool] = GroupCommit(many=runs_finish, one=lambda finish: runs_finish([finish])[0])
_checkpoint_locks: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock]" = weakref.WeakKeyDictionary()


def checkpoint_lock() -> asyncio.Lock:
    """Orders a run's checkpoints (the supervisor's) and its round stores (this loop's lock): a
    heartbeat that read a run's unsaved text before a round took it must not write it after the
    round was stored, or a reaper would store that text twice."""
    loop = asyncio.get_running_loop()
    lock = _checkpoint_locks.get(loop)
    if lock is None:
        lock = _checkpoint_locks[loop] = asyncio.Lock()
    return lock


class FrameFailed(Exception):
    """A frame could not be built or encoded (a bug: outside text is cleaned when events are made)."""


@dataclass(frozen=True)
class RunPlan:
    run: Run  # the admitted row: ids, conversation, request id, agent name
    agent: Agent
    history: list[dict]
    ctx: RunContext
    # What produces the turn's events: the runtime's entry point (tests give a scripted one).
    events: Callable[..., AsyncIterator[Event | Paused]] = turn_stream
    # A run resumed after a wait: the calls that waited (their results come first).
    resumed: tuple[ToolCall, ...] = ()
    question: str = ""  # as the log may keep it (QuestionCheck.logged_question): for the turn's line


# A run's opening, run inside its lease: (the plan to run, or None when nothing runs; what
# whoever opened it is told). It raises ApiError to refuse, and then stores nothing.
Opening = Callable[[RunLease], Awaitable[tuple[RunPlan | None, object]]]


class RunTask:
    """Starts the run's task at once; `opened` says how its opening went (await it shielded: the
    run does not end with whoever waits for it); `stop()` cancels the run (and its tools) from any
    task of this loop."""

    def __init__(self, opening: Opening, *, lease: RunLease):
        self.lease = lease
        self._opening = opening
        self.opened: asyncio.Future = asyncio.get_running_loop().create_future()
        # Its refusal is the opener's to read; one who left does not, and that is no error to log.
        self.opened.add_done_callback(lambda opened: opened.cancelled() or opened.exception())
        self.plan: RunPlan | None = None
        self.run: Run | None = None
        self.recorder = TurnRecorder()
        self.paused = False  # waits for a person: the task ended, the log did not
        self.checkpointed = ""  # the unsaved text as of the last checkpoint
        self._held: list[Chunk | Reasoning] = []  # deltas of one kind coalescing into the next frame
        self._flush_timer: asyncio.TimerHandle | None = None
        self._last_chunk_at = float("-inf")
        self._started = time.perf_counter()
        self._first_chunk_ms: int | None = None
        self._admit_ms: int | None = None
        self._waiting: list[str] = []  # the tools a pause waits on
        self._cut: str | None = None  # why the engine itself cut the run (budget, failure, storing)
        self._shutdown = False
        self.stopping = False
        self.stop_reason = "stop"
        self._finishing = False
        self._announce: Callable[[], Awaitable[None]] | None = None  # set once the end is stored
        self.writer = None
        self.task = background(self._main())

    @property
    def log(self):
        return self.writer.log

    @property
    def active(self) -> bool:
        return self.writer is not None and not self.log.ended and not self.paused

    def stop(self, reason: str = "stop") -> bool:
        """Cancels the run; False when it has ended, or is storing its end (a cancel then would
        cut the end after it was stored): `settled()` waits for that. `reason` (who stopped it:
        stop, client_gone, cancelled, deleted) is for the turn's log line."""
        if self.task.done() or self.writer is None or self.log.ended or self._finishing:
            return False
        self.stopping = True
        self.stop_reason = reason
        self.task.cancel()
        return True

    async def settled(self) -> None:
        """Waits (bounded, never cancelling it) until the run's task has stored and announced its end."""
        if not self.task.done():
            await asyncio.wait({self.task}, timeout=SETTLE_WAIT_SEC)

    def _forget(self) -> None:
        if local_runs.get(self.run.id) is self:  # not a later task of the same run (resumed here)
            local_runs.pop(self.run.id, None)

    def _outcome(self) -> str:
        """How the run ended, for the metrics (campus_agent.base.metrics.RUN_OUTCOMES)."""
        if self.paused:
            return "paused"
        if self.stopping:
            return "stopped"
        if self.recorder.interrupted:
            return "interrupted"
        done = self.recorder.done
        return "fallback" if done is not None and getattr(done, "fallback", False) else "completed"

    async def _main(self) -> None:
        try:
            async with self.lease:  # the one release of the slot, whatever the ending, before the end is announced
                if await self._open():
                    await self._observed()
        finally:
            if self.plan is not None:
                await (self._announce or self._announce_cut)()  # none stored: a bug; followers still get an end
                keep = settings.RUN_LOG_RETAIN_SEC + (settings.APPROVAL_TIMEOUT_SEC if self.paused else 0)
                run_bus().retain(self.run.id, keep)
                asyncio.get_running_loop().call_later(keep, self._forget)  # as long as its log

    async def _open(self) -> bool:
        """Runs the opening; True when there is a run to go on with, begun here."""
        try:
            plan, outcome = await self._opening(self.lease)
        except asyncio.CancelledError:
            self.opened.cancel()
            raise
        except Exception as refused:  # an ApiError, or a failure the opener answers for
            if not self.opened.done():
                self.opened.set_exception(refused)
            return False
        if plan is not None:
            self.plan, self.run = plan, plan.run
            self.writer = run_bus().open(self.run.id, base=self.run.frames_seq)
            if plan.resumed:
                self.recorder.resume_round(list(plan.resumed))
            else:
                self._admit_ms = round((time.perf_counter() - self._started) * 1000)
            local_runs[self.run.id] = self
        if not self.opened.done():  # cancelled only by a bug: the openers await it shielded
            self.opened.set_result(outcome)
        return plan is not None

    async def _observed(self) -> None:
        # Whatever the gateway writes into this run (notices, errors, the keyword routing's
        # answer) is in its student's language; the task's own context keeps it to this run.
        translation.activate(self.plan.ctx.language or settings.LANGUAGE_CODE)
        ACTIVE_RUNS.inc()
        try:
            async with ThreadSensitiveContext(executor=turn_sync_executor):
                with run_span(agent=self.plan.agent, ctx=self.plan.ctx, run_id=self.run.id) as span:
                    await self._run()
                    span.ended(interrupted=self.recorder.interrupted, stopped=self.stopping, paused=self.paused)
        finally:
            ACTIVE_RUNS.dec()
            run_counted(agent=self.plan.agent.slug, outcome=self._outcome())
            try:
                turn_end_log(self._turn_end())
            except Exception:  # a bug in the line must not cut the run's end (its announcement follows)
                logger.exception("the turn's log line could not be written")

    def _turn_ended(self) -> tuple[str, str | None]:
        """The turn's outcome and its reason, for its log line (chat_app.runs.turn_log)."""
        recorder = self.recorder
        if self.paused:
            return PAUSED, ",".join(self._waiting)
        if self._shutdown:
            return CANCELLED, "shutdown"
        if self.stopping:
            return STOPPED, self.stop_reason
        # A blocked question is answered with a fixed message; a blocked answer ends there
        # (interrupted); a tool's blocked text only leaves that text out: the turn goes on.
        blocks = [(stage, category) for stage, action, category in recorder.moderation if action == "block"]
        if blocks and (recorder.interrupted or any(stage == "question" for stage, _ in blocks)):
            return BLOCKED, ":".join(blocks[0])
        if self._cut is not None:
            return INTERRUPTED, self._cut
        done = recorder.done
        if done is not None and done.interrupted_reason:
            return INTERRUPTED, done.interrupted_reason
        if recorder.interrupted:  # a failure cut the answer; one the turn went on after (a tool's) is in `errors`
            return (ERROR, str(recorder.errors[0].code)) if recorder.errors else (INTERRUPTED, None)
        if done is not None and done.fallback:
            return FALLBACK, None
        return OK, None

    def _turn_end(self) -> TurnEnd:
        recorder, plan = self.recorder, self.plan
        outcome, reason = self._turn_ended()
        tools, failed = recorder.tools_called()
        done = recorder.done
        usage = done.usage if done is not None and isinstance(done.usage, dict) else {}
        return TurnEnd(
            outcome=outcome, reason=reason, user=plan.ctx.user_id, agent=plan.agent.slug, run=str(self.run.id),
            conversation=str(self.run.conversation_id), tools=tools, tools_failed=failed,
            prompt_tokens=usage.get("prompt_tokens"), completion_tokens=usage.get("completion_tokens"),
            provider=done.provider if done is not None else None, model=done.model if done is not None else None,
            first_chunk_ms=self._first_chunk_ms, total_ms=round((time.perf_counter() - self._started) * 1000),
            admit_ms=self._admit_ms, chars=len(recorder.reply_text), history=len(plan.history),
            resumed=bool(plan.resumed), question=plan.question, errors=[error.code for error in recorder.errors],
            moderation=[":".join(hit) for hit in recorder.moderation],
        )

    async def _announce_cut(self) -> None:
        if self.log.ended:
            return
        try:
            self._emit(Done(full_text=self.recorder.full_text, interrupted=True))
        except FrameFailed:
            logger.exception("the closing done frame could not be built")
            self.log.end()

    async def _run(self) -> None:
        request_id_set(self.plan.ctx.request_id)
        recorder = self.recorder
        started = time.perf_counter()
        # One deadline for the whole run, carried to every step by the context.
        deadline = asyncio.get_running_loop().time() + settings.TURN_BUDGET_SEC
        ctx = dataclasses.replace(self.plan.ctx, deadline=deadline)
        paused: Paused | None = None
        try:
            budget = asyncio.timeout_at(deadline + BUDGET_BACKSTOP_SEC)
            async with budget:
                events = self.plan.events(agent=self.plan.agent, history=self.plan.history, ctx=ctx)
                async with aclosing(events):
                    async for event in events:
                        if isinstance(event, Paused):
                            paused = event
                            break
                        recorder.add(event)
                        if isinstance(event, ToolResult):
                            await self._rounds_store()
                        elif isinstance(event, Moderation):  # each hit is an audit row (docs/safety.md)
                            await self._moderation_audit(event)
                        if not isinstance(event, Done):  # held back until the reply is stored
                            self._publish(event)
        except TimeoutError:
            if budget.expired():
                logger.warning("run cut by the {}s budget", settings.TURN_BUDGET_SEC)
                self._cut = "budget"
                self._fail(Error(DOWNSTREAM, TURN_BUDGET_MESSAGE))
            else:  # some timeout inside the runtime that it did not turn into an event
                logger.exception("run failed")
                self._cut = "failed"
                self._fail(Error(GENERAL, TURN_FAILED_MESSAGE))
        except FrameFailed:
            logger.exception("a frame could not be built; ending the run")
            self._cut = "frame_failed"
            self._fail(Error(GENERAL, FRAME_FAILED_MESSAGE))
        except asyncio.CancelledError:
            recorder.interrupt()
            if not self.stopping:  # the worker is shutting down: store what there is, then go
                logger.debug("run cancelled by shutdown; storing the partial reply")
                self._shutdown = True
                await self._finish()
                raise
            asyncio.current_task().uncancel()  # a stop ends the run here, normally
            logger.debug("run stopped ({}); storing the partial reply", self.stop_reason)
        except Exception:
            logger.exception("run failed")
            self._cut = "failed"
            self._fail(Error(GENERAL, TURN_FAILED_MESSAGE))
        else:
            if paused is not None and await self._pause(paused):
                return
        if recorder.interrupted and self._cut is None and asyncio.get_running_loop().time() >= deadline:
            self._cut = "budget"  # the runtime cut its own step at the deadline (its error says so too)
        await self._finish()
        logger.debug(
            "run end tools={} interrupted={} chars={} cost_ms={:.0f}",
            recorder.tool_call_count, recorder.interrupted, len(recorder.reply_text),
            (time.perf_counter() - started) * 1000,
        )

    async def _moderation_audit(self, notice: Moderation) -> None:
        try:
            await db_call(moderation_audit, run=self.run, notice=notice)
        except Exception:  # the reply goes on; the hit is still in the reply's meta and the log
            logger.exception("the moderation hit could not be audited")

    def _fail(self, error: Error) -> None:
        self.recorder.add(error)
        self.recorder.interrupt()
        self.recorder.done = None  # whatever Done came before the failure no longer describes the reply
        self._chunks_flush_quietly()
        self._emit(error)

    def _cut_calls_announce(self) -> None:
        """Just before `done`, a `tool_result` (interrupted) for every call the run ends without:
        no `tool_call` is left without its result, live as in the stored rows (stored cut)."""
        for call in self.recorder.calls_cut():
            self._emit(ToolResult(call_id=call.call_id, tool=call.tool, ok=False, content=TOOL_CUT_MESSAGE,
                                  error=TOOL_CUT_MESSAGE, interrupted=True))

    def _publish(self, event: Event) -> None:
        """Emits the event; model text and reasoning are coalesced (see `_chunk_publish`)."""
        if isinstance(event, Chunk | Reasoning):
            self._chunk_publish(event)
            return
        self._chunks_flush()
        self._emit(event)

    def _chunk_publish(self, chunk: Chunk | Reasoning) -> None:
        """Text deltas that arrive within CHUNK_COALESCE_SEC of the last chunk frame go out as one
        frame (as LibreChat does at 25 ms): a model streaming a token every few ms costs a dozen
        frames a second, not a hundred (JSON, log append, socket write each). The first chunk,
        and one after a pause, goes out at once, so the time to first text is unchanged. Only
        deltas of one kind merge (answer, keyword-routing answer, reasoning)."""
        if self._held and _delta_kind(self._held[0]) != _delta_kind(chunk):
            self._chunks_flush()
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self._last_chunk_at == float("-inf"):  # the first text (or reasoning) the student sees
            first = time.perf_counter() - self._started
            FIRST_CHUNK.observe(first)
            self._first_chunk_ms = round(first * 1000)
        if not self._held and now - self._last_chunk_at >= CHUNK_COALESCE_SEC:
            self._last_chunk_at = now
            self._emit(chunk)
            return
        self._held.append(chunk)
        if self._flush_timer is None:
            self._flush_timer = loop.call_at(self._last_chunk_at + CHUNK_COALESCE_SEC, self._chunks_flush_quietly)

    def _chunks_flush(self) -> None:
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None
        if not self._held:
            return
        held, self._held = self._held, []
        self._last_chunk_at = asyncio.get_running_loop().time()
        self._emit(held[0] if len(held) == 1 else _deltas_merged(held))

    def _chunks_flush_quietly(self) -> None:
        # From the flush timer (a loop callback, where an exception would only be logged) and
        # on failure paths: a frame that cannot be built cancels the run instead.
        try:
            self._chunks_flush()
        except FrameFailed:
            logger.exception("held text could not be sent; ending the run")
            self._held = []
            if not self.task.done() and asyncio.current_task() is not self.task:
                self.task.cancel()

    def _emit(self, event: Event) -> None:
        """Appends the event's frame to the log; raises FrameFailed (nothing appended) when it
        cannot be built or encoded, which ends the run with `error` + `done`, never a hang."""
        seq = self.log.last_seq + 1
        try:
            payload = event.frame(message_id=str(self.run.message_id)) if isinstance(event, Done) else event.frame()
            frame = sse_frame(payload, event_id=seq).encode()
        except Exception as exc:
            raise FrameFailed(type(event).__name__) from exc
        self.writer.append(frame, end=isinstance(event, Done))

    async def _rounds_store(self) -> None:
        """Stores the tool rounds that just finished, so a dead worker loses none of them."""
        async with checkpoint_lock():
            rows = self.recorder.finished_rounds_take()
            if not rows:
                return
            unsaved = self.recorder.unsaved_text
            # Shielded: a stop arriving meanwhile must not let the reply be stored before the round.
            storing = asyncio.ensure_future(db_call(run_rows_store, run=self.run, rows=rows, unsaved_text=unsaved))
            try:
                await asyncio.shield(storing)
            except asyncio.CancelledError:
                await asyncio.wait({storing})
                raise
            except Exception:
                logger.exception("storing a finished tool round failed; it is stored with the reply")
                self.recorder.finished_rounds_untake(rows)
            else:
                self.checkpointed = unsaved

    async def _pause(self, paused: Paused) -> bool:
        """Stores the pause (the round so far, what the person is asked, the turn's state); its
        announcement (the waiting frames) follows the lease's release. False when the pause could
        not be stored: the run ends (interrupted) instead."""
        self._finishing = True
        self._chunks_flush_quietly()
        frames_seq = self.log.last_seq + len(paused.waiting)
        try:
            storing = asyncio.ensure_future(db_call(
                wait_pause_store, run=self.run, rows=self.recorder.paused_rows(), waiting=list(paused.waiting),
                state=paused.state, frames_seq=frames_seq,
            ))
            stored = await asyncio.shield(storing)
        except Exception:
            logger.exception("storing the pause failed; ending the run")
            self.recorder.add(Error(GENERAL, TURN_FAILED_MESSAGE))
            self.recorder.interrupt()
            self._emit(Error(GENERAL, TURN_FAILED_MESSAGE))
            return False
        if not stored:  # reaped meanwhile: the reaper stored its end
            self.recorder.interrupt()
            return False
        self.paused = True
        self._waiting = [w.tool for w in paused.waiting]

        async def announce() -> None:
            for waiting in paused.waiting:
                self._emit(waiting)
            await self.writer.pause()
            logger.debug("run paused for a person calls={}", self._waiting)

        self._announce = announce
        return True

    async def _finish(self) -> None:
        """Stores the reply; its announcement (`done`) follows the lease's release.

        The reply is what must not be lost: when its rows cannot be stored (whatever the reason:
        a value a column cannot hold, the database refusing a row), the reply text is stored
        alone, marked (`store_failed`, the error), and the run ends interrupted; when even that
        fails, the run is marked for the reaper with its text, so it is ended at its next sweep
        (not kept alive by this worker's beat) and its mark says the store failed."""
        self._finishing = True
        recorder = self.recorder
        self._chunks_flush_quietly()
        try:
            await FINISHES(Finish(run=self.run, rows=recorder.rows(), interrupted=recorder.interrupted))
        except Exception:
            logger.exception("storing the run failed; storing the reply text alone")
            await self._finish_reply_only()

        async def announce() -> None:
            self._cut_calls_announce()
            done = recorder.done or Done(full_text=recorder.full_text, interrupted=True)
            if recorder.interrupted and not done.interrupted:
                done = dataclasses.replace(done, interrupted=True)
            try:
                self._emit(done)
            except FrameFailed:
                logger.exception("the done frame could not be built; sending a bare one")
                self._emit(Error(GENERAL, FRAME_FAILED_MESSAGE))
                self._emit(Done(full_text="", interrupted=True))
            await self.writer.ended()

        self._announce = announce

    async def _finish_reply_only(self) -> None:
        recorder = self.recorder
        partial = Error(GENERAL, STORE_PARTIAL_MESSAGE)
        try:
            await db_call(run_finish, run=self.run, rows=[recorder.reply_row(error=partial)], interrupted=True)
        except Exception:
            logger.exception("storing the reply text failed too; the reaper ends the run")
            with suppress(Exception):
                await db_call(run_store_failed_mark, run=self.run, text=recorder.unsaved_text)
            partial = Error(GENERAL, STORE_FAILED_MESSAGE)
        recorder.interrupt()
        self._cut = "store_failed"
        with suppress(FrameFailed):
            self._emit(partial)


def _delta_kind(event: Chunk | Reasoning) -> tuple:
    return (type(event), getattr(event, "fallback", False))


def _deltas_merged(held: list[Chunk | Reasoning]) -> Chunk | Reasoning:
    content = "".join(event.content for event in held)
    first = held[0]
    return Reasoning(content) if isinstance(first, Reasoning) else Chunk(content, fallback=first.fallback)


# --- the moves ------------------------------------------------------------------------------------

class StopOutcome(enum.Enum):
    STOPPING = "stopping"  # cancelled here, asked of its worker, or ended (it waited / its worker died)
    FINISHED = "finished"  # it had already ended
    UNREACHABLE = "unreachable"  # another worker runs it and this bus cannot reach it (no Redis)


def _turn_plan(start: TurnStart, *, caller: Caller, chat: ChatInput, request_id: str) -> RunPlan:
    ctx = RunContext(
        request_id=request_id,
        conversation_id=str(start.conversation_id),
        user_id=caller.user.pk,
        audience=start.audience,
        campus_token=caller.campus_token,
        hint_domain=start.hint_domain,
        language=chat.language,
        matchers=start.moderation.matchers,
    )
    notices = start.moderation.notices()
    if start.moderation.blocked is not None:
        events = blocked_answer(notices)
    else:
        events = notices_first(notices, turn_stream) if notices else turn_stream
    return RunPlan(run=start.run, agent=start.agent, history=start.history, ctx=ctx, events=events,
                   question=start.moderation.logged_question)


def run_start(*, caller: Caller, chat: ChatInput, request_id: str) -> RunTask:
    """A new turn of a known caller, admitted inside its run's lease (chat_app.runs.admission):
    `await task.opened` gives its Run, or raises the ApiError that refused it."""

    async def opening(lease: RunLease) -> tuple[RunPlan, Run]:
        start = await turn_open(lease, caller=caller, chat=chat, request_id=request_id)
        logger.debug(
            "chat turn start user={} conversation={} run={} agent={} history={} message={!r}",
            caller.user.pk, start.conversation_id, start.run.id, start.agent.slug, len(start.history),
            clip_text(start.moderation.logged_question),
        )
        return _turn_plan(start, caller=caller, chat=chat, request_id=request_id), start.run

    return RunTask(opening, lease=RunLease(user_id=caller.user.pk, new_message=True))


def _resumed_plan(resumption: Resumption, *, campus_token: str | None) -> RunPlan:
    run = resumption.run
    ctx = RunContext(
        request_id=run.request_id,
        conversation_id=str(run.conversation_id),
        user_id=run.user_id,
        audience=resumption.audience,
        campus_token=campus_token,
        hint_domain=run.conversation.hint_domain or None,
        language=run.language or None,
    )
    decided = [DecidedCall(call_id=w.call_id, tool=w.tool, args=w.args, decision=w.status, kind=runtime_kind(w.kind),
                           answers=resumption.answers.get(w.call_id, ()))
               for w in resumption.decided]
    return RunPlan(
        run=run,
        agent=resumption.agent,
        history=resumption.history,
        ctx=ctx,
        events=functools.partial(turn_resume_stream, state=resumption.state, decided=decided),
        resumed=tuple(ToolCall(call_id=w.call_id, tool=w.tool, args=w.args) for w in resumption.decided),
    )


async def run_answer(*, run: Run, call_id: str, approve: bool, campus_token: str | None,
                     authorized: bool = False, answer: dict | None = None) -> tuple[Decision, bool]:
    """Records the student's answer to one call the run waits on; the answer that completes the
    pause re-admits the run (a slot, the quota: ApiError 429 when refused, and nothing is recorded)
    and resumes it here. Returns the decision and whether the run goes on now. Raises WaitRefused.
    `campus_token`: the answering student's, for the sub-agents; `authorized`: the answer is the
    student's authorization of the call's service (the OAuth callback); `answer`: their answer to
    what the call's server asked ({action, content})."""

    async def opening(lease: RunLease) -> tuple[RunPlan | None, tuple[Decision, bool]]:
        decision, resumption = await answer_open(lease, run=run, call_id=call_id, approve=approve,
                                                 authorized=authorized, answer=answer)
        plan = _resumed_plan(resumption, campus_token=campus_token) if resumption is not None else None
        # A late answer counts as expired; the run may go on without it all the same.
        return plan, (decision, plan is not None and not decision.late)

    task = RunTask(opening, lease=RunLease(user_id=run.user_id, new_message=False))
    return await asyncio.shield(task.opened)


async def runs_resume_ready() -> None:
    """The supervisor's sweep: every waiting run that can go on now goes on (on whichever worker
    claims it first), admitted like a new turn."""
    for run_id, user_id in await db_call(waits_expire):

        async def opening(lease: RunLease, run_id=run_id) -> tuple[RunPlan | None, None]:
            resumption = await ready_open(lease, run_id=run_id)
            return (_resumed_plan(resumption, campus_token=None) if resumption is not None else None), None

        await asyncio.shield(RunTask(opening, lease=RunLease(user_id=user_id, new_message=False)).opened)


async def _reaped(run: Run, *, slot_key: str) -> None:
    """A run ended by the reaper: the slot its row named given back (no task holds its lease any
    more), its followers given its end."""
    async with RunLease.adopted(key=slot_key):
        await run_ended_announce(run)


async def runs_reap_stale() -> list[Run]:
    """The supervisor's sweep: runs whose worker died are ended as interrupted."""
    reaped = await db_call(runs_reap, stale_sec=settings.RUN_STALE_SEC)
    for run in reaped:
        await _reaped(run, slot_key=run.slot_key)  # as read before the reap emptied it
    return reaped


async def run_stop(*, run: Run, reason: str = "stop") -> StopOutcome:
    """Stops the run, whatever its state and wherever it runs (docs/design.md#runs). `reason`
    reaches the turn's log line when this worker runs it (over the bus, another's says `stop`)."""
    local = local_runs.get(run.id)
    if local is not None:
        if local.stop(reason):
            return StopOutcome.STOPPING
        await local.settled()  # storing its end or its pause: look again once it has
    run = await db_call(run_refresh, run_id=run.id) or run
    if run.status == Run.Status.WAITING:
        if await waiting_run_close(run_id=run.id, reason="stopped"):
            return StopOutcome.STOPPING
        run = await db_call(run_refresh, run_id=run.id) or run  # resumed meanwhile (perhaps here)
        local = local_runs.get(run.id)
        if local is not None and local.stop(reason):
            return StopOutcome.STOPPING
    if not run.active:
        return StopOutcome.FINISHED
    if await run_bus().stop_publish(run.id):
        return StopOutcome.STOPPING
    # No bus to its worker: a dead worker's run is ended here and now; a live one is out of reach.
    if run_is_stale(run=run, stale_sec=settings.RUN_STALE_SEC):
        # Claimed only if it has not beaten since it was read (a worker that came back wins).
        if await db_call(run_reap, run=run, stale_before=run.heartbeat_at + timedelta(microseconds=1)):
            await _reaped(await db_call(run_refresh, run_id=run.id) or run, slot_key=run.slot_key)
        return StopOutcome.STOPPING
    return StopOutcome.UNREACHABLE


def _active_runs(user_id: int, conversation_id) -> list[Run]:
    runs = Run.objects.filter(user_id=user_id, status__in=Run.ACTIVE)
    return list(runs.filter(conversation_id=conversation_id) if conversation_id is not None else runs)


async def runs_end_before_delete(*, user_id: int, conversation_id=None) -> None:
    """Stops the runs of the conversations about to be deleted (one, or all of the user's) and
    waits, bounded, for those this worker runs to settle. A run left going would answer into a
    conversation that is gone until its budget ran out, holding the student's stream slot, and
    nobody could stop it any more: its row goes with the conversation."""
    for run in await db_call(_active_runs, user_id, conversation_id):
        if await run_stop(run=run, reason="deleted") is StopOutcome.UNREACHABLE:
            logger.warning("run {} of a deleted conversation runs on a worker this one cannot reach", run.id)
        if (local := local_runs.get(run.id)) is not None:
            await local.settled()


def stop_apply(run_id: str) -> None:
    """A stop asked over the bus: acted on when this worker runs the run, ignored otherwise."""
    try:
        task = local_runs.get(uuid.UUID(run_id))
    except ValueError:
        return
    if task is not None:
        task.stop()
