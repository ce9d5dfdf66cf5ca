"""The run task: what runs a chat turn on this worker, from admission (or resumption) to its end.

A `RunTask` is started by chat_app.runs.lifecycle and ends when its end is stored, whatever the
clients do meanwhile: it holds the slot lease, carries the turn's deadline, keeps the record
(`TurnRecorder`), stores each finished tool round as it finishes, hands its unsaved text to the
worker's supervisor for the 2-second checkpoints, and stores its end — the reply (partial and
marked interrupted when it was stopped, cut by a failure or by the budget), or its pause when it
waits for a person. Then, in one place, it releases its lease and announces that end (`done`, or
what it waits for). Every event is a numbered SSE frame written to the run bus (runs.bus);
clients only follow that (runs.follow).

It runs in its own task, not in a response generator: the generator belongs to one client and
is cancelled when that client goes away; the run is cancelled only by `stop()`.
"""
import asyncio
import dataclasses
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing, suppress
from dataclasses import dataclass

from asgiref.sync import ThreadSensitiveContext
from django.conf import settings
from django.utils import translation
from django.utils.translation import gettext_lazy as _
from loguru import logger

from agents_app.models import Agent
from agents_app.runtime.context import RunContext
from agents_app.runtime.events import Chunk, Done, Error, Event, Paused, Reasoning, ToolCall, ToolResult
from agents_app.runtime.tracing import run_span
from agents_app.runtime.turn import turn_stream
from campus_agent.base.asyncdb import db_call, turn_sync_executor
from campus_agent.base.errors import DOWNSTREAM, GENERAL
from campus_agent.base.metrics import ACTIVE_RUNS, FIRST_CHUNK, run_counted
from campus_agent.base.request_id import request_id_set
from campus_agent.base.sse import sse_frame
from chat_app.models import Run
from chat_app.runs.bus import run_bus
from chat_app.runs.lease import SlotLease
from chat_app.runs.recording import TOOL_CUT_MESSAGE, TurnRecorder
from chat_app.runs.state import local_runs, run_finish, run_rows_store, run_store_failed_mark
from chat_app.runs.wait import approval_pause_store

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
_running: set[asyncio.Task] = set()  # strong references: the loop keeps only weak ones
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
    # A run resumed after an approval pause: the calls that waited (their results come first).
    resumed: tuple[ToolCall, ...] = ()


class RunTask:
    """Starts the run at once; `stop()` cancels it (and its tools) from any task of this loop."""

    def __init__(self, plan: RunPlan, *, lease: SlotLease):
        self.plan = plan
        self.run = plan.run
        self.lease = lease
        self.recorder = TurnRecorder()
        self.paused = False  # waits for a person: the task ended, the log did not
        self.checkpointed = ""  # the unsaved text as of the last checkpoint
        self._held: list[Chunk | Reasoning] = []  # deltas of one kind coalescing into the next frame
        self._flush_timer: asyncio.TimerHandle | None = None
        self._last_chunk_at = float("-inf")
        self._started = time.perf_counter()
        self.stopping = False
        self._finishing = False
        self._announce: Callable[[], Awaitable[None]] | None = None  # set once the end is stored
        self.writer = run_bus().open(self.run.id, base=self.run.frames_seq)
        if plan.resumed:
            self.recorder.resume_round(list(plan.resumed))
        local_runs[self.run.id] = self
        self.task = asyncio.create_task(self._main(), name=f"run-{self.run.id}")
        _running.add(self.task)
        self.task.add_done_callback(_running.discard)

    @property
    def log(self):
        return self.writer.log

    @property
    def active(self) -> bool:
        return not self.log.ended and not self.paused

    def stop(self) -> bool:
        """Cancels the run; False when it has ended, or is storing its end (a cancel then would
        cut the end after it was stored): `settled()` waits for that."""
        if self.task.done() or self.log.ended or self._finishing:
            return False
        self.stopping = True
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
            # The one release of the lease, whatever the ending, before the end is announced:
            # the client may ask again at once.
            await self.lease.release()
            await (self._announce or self._announce_cut)()  # none stored: a bug; followers still get an end
            keep = settings.RUN_LOG_RETAIN_SEC + (settings.APPROVAL_TIMEOUT_SEC if self.paused else 0)
            run_bus().retain(self.run.id, keep)
            asyncio.get_running_loop().call_later(keep, self._forget)  # as long as its log

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
                        if not isinstance(event, Done):  # held back until the reply is stored
                            self._publish(event)
        except TimeoutError:
            if budget.expired():
                logger.warning("run cut by the {}s budget", settings.TURN_BUDGET_SEC)
                self._fail(Error(DOWNSTREAM, TURN_BUDGET_MESSAGE))
            else:  # some timeout inside the runtime that it did not turn into an event
                logger.exception("run failed")
                self._fail(Error(GENERAL, TURN_FAILED_MESSAGE))
        except FrameFailed:
            logger.exception("a frame could not be built; ending the run")
            self._fail(Error(GENERAL, FRAME_FAILED_MESSAGE))
        except asyncio.CancelledError:
            recorder.interrupt()
            if not self.stopping:  # the worker is shutting down: store what there is, then go
                logger.info("run cancelled by shutdown; storing the partial reply")
                await self._finish()
                raise
            asyncio.current_task().uncancel()  # a stop ends the run here, normally
            logger.info("run stopped; storing the partial reply")
        except Exception:
            logger.exception("run failed")
            self._fail(Error(GENERAL, TURN_FAILED_MESSAGE))
        else:
            if paused is not None and await self._pause(paused):
                return
        await self._finish()
        logger.info(
            "run end tools={} interrupted={} chars={} cost_ms={:.0f}",
            recorder.tool_call_count, recorder.interrupted, len(recorder.reply_text),
            (time.perf_counter() - started) * 1000,
        )

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
            FIRST_CHUNK.observe(time.perf_counter() - self._started)
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
                approval_pause_store, run=self.run, rows=self.recorder.paused_rows(), waiting=list(paused.waiting),
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

        async def announce() -> None:
            for waiting in paused.waiting:
                self._emit(waiting)
            await self.writer.pause()
            logger.info("run paused for approval calls={}", [w.tool for w in paused.waiting])

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
            await db_call(run_finish, run=self.run, rows=recorder.rows(), interrupted=recorder.interrupted)
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
        with suppress(FrameFailed):
            self._emit(partial)


def _delta_kind(event: Chunk | Reasoning) -> tuple:
    return (type(event), getattr(event, "fallback", False))


def _deltas_merged(held: list[Chunk | Reasoning]) -> Chunk | Reasoning:
    content = "".join(event.content for event in held)
    first = held[0]
    return Reasoning(content) if isinstance(first, Reasoning) else Chunk(content, fallback=first.fallback)
