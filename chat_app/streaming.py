"""One chat turn as a task, and its relay to the client as SSE frames.

The turn runs in its own task (`TurnRun`), not inside the response generator, because the
generator is driven by the HTTP server and may be cancelled or simply dropped when the client
goes away. The task owns the turn from start to end: it iterates `turn_stream` (in one task,
so the runtime's own timeouts and cancel scopes stay in the task that entered them), keeps the
record, stores it when the run ends, however it ends, and releases the stream slot. The
generator only relays queued events as frames, adds `: ping` while idle, and cancels the task
when the client is gone (Django cancels the generator on disconnect, ref/request-response
"Handling disconnects"; the task then stores the partial reply as interrupted and re-raises).
"""
import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, replace

from asgiref.sync import ThreadSensitiveContext
from django.conf import settings
from loguru import logger

from agents_app.models import Agent
from agents_app.runtime.context import RunContext
from agents_app.runtime.events import Done, Error, Event
from agents_app.runtime.turn import turn_stream
from campus_agent.errors import DOWNSTREAM, GENERAL
from campus_agent.request_id import request_id_set
from campus_agent.sse import PING_FRAME, sse_frame
from chat_app.asyncdb import db_call, turn_sync_executor
from chat_app.limits import StreamSlot, stream_slot_release
from chat_app.services.recording import TurnRecorder
from chat_app.services.turns import turn_store

TURN_BUDGET_MESSAGE = "本轮回答超出时间限制，已中断。"
TURN_FAILED_MESSAGE = "服务内部错误，回答已中断，请稍后重试。"
STORE_FAILED_MESSAGE = "回答保存失败，刷新后可能看不到这条回答。"
FRAME_FAILED_MESSAGE = "回答显示出错，已中断；已保存的内容刷新后可以看到。"

# The runtime enforces TURN_BUDGET_SEC itself, step by step; this outer cut is the backstop for
# whatever it might not bound (a path that overruns its own deadline), so it fires a little later.
BUDGET_BACKSTOP_SEC = 1.0
_END = object()
_PING = PING_FRAME.encode()
_running: set[asyncio.Task] = set()  # strong references: the loop keeps only weak ones


@dataclass(frozen=True)
class TurnPlan:
    agent: Agent
    history: list[dict]
    ctx: RunContext
    conversation_id: uuid.UUID
    message_id: uuid.UUID  # the final assistant row's id, announced in `session` and `done`
    budget_sec: float


class TurnRun:
    """Starts the turn at once; `frames()` relays it. The stream slot is given back when the
    reply is stored (same thread hop)."""

    def __init__(self, plan: TurnPlan, *, slot: StreamSlot):
        self.plan = plan
        self.queue: asyncio.Queue = asyncio.Queue()
        self._slot = slot
        self.recorder = TurnRecorder()
        self.task = asyncio.create_task(self._run(), name=f"chat-turn-{plan.ctx.request_id}")
        _running.add(self.task)
        self.task.add_done_callback(_running.discard)

    async def _run(self) -> None:
        async with ThreadSensitiveContext(executor=turn_sync_executor):
            await self._run_turn()

    async def _run_turn(self) -> None:
        request_id_set(self.plan.ctx.request_id)
        recorder = self.recorder
        started = time.perf_counter()
        try:
            try:
                budget = asyncio.timeout(self.plan.budget_sec + BUDGET_BACKSTOP_SEC)
                async with budget:
                    events = turn_stream(agent=self.plan.agent, history=self.plan.history, ctx=self.plan.ctx)
                    async with aclosing(events):
                        async for event in events:
                            recorder.add(event)
                            if not isinstance(event, Done):  # held back until the reply is stored
                                self.queue.put_nowait(event)
            except TimeoutError:
                if budget.expired():
                    logger.warning("chat turn cut by the {}s budget", self.plan.budget_sec)
                    self._fail(recorder, Error(DOWNSTREAM, TURN_BUDGET_MESSAGE))
                else:  # some timeout inside the runtime that it did not turn into an event
                    logger.exception("chat turn failed")
                    self._fail(recorder, Error(GENERAL, TURN_FAILED_MESSAGE))
            except asyncio.CancelledError:
                recorder.interrupt()
                logger.info("chat turn cancelled (client gone); storing the partial reply")
                await self._store(recorder)
                raise
            except Exception:
                logger.exception("chat turn failed")
                self._fail(recorder, Error(GENERAL, TURN_FAILED_MESSAGE))
            stored = await self._store(recorder)
            if not stored:
                self.queue.put_nowait(Error(GENERAL, STORE_FAILED_MESSAGE))
            done = recorder.done or Done(full_text=recorder.reply_text, interrupted=True)
            self.queue.put_nowait(done)
            logger.info(
                "chat turn end tools={} interrupted={} chars={} cost_ms={:.0f}",
                recorder.tool_call_count, recorder.interrupted, len(recorder.reply_text),
                (time.perf_counter() - started) * 1000,
            )
        finally:
            if not self._slot.released:  # storing never ran (a bug): do not leak the slot
                await db_call(stream_slot_release, slot=self._slot)
            self.queue.put_nowait(_END)

    def _fail(self, recorder: TurnRecorder, error: Error) -> None:
        recorder.add(error)
        recorder.interrupt()
        recorder.done = None  # whatever Done came before the failure no longer describes the reply
        self.queue.put_nowait(error)

    def _store_and_release(self, rows) -> None:
        try:
            turn_store(
                conversation_id=self.plan.conversation_id,
                final_message_id=self.plan.message_id,
                rows=rows,
                agent_name=self.plan.agent.name,
                request_id=self.plan.ctx.request_id,
            )
        finally:
            stream_slot_release(slot=self._slot)

    async def _store(self, recorder: TurnRecorder) -> bool:
        try:
            await db_call(self._store_and_release, recorder.rows())
        except Exception:
            logger.exception("storing the chat turn failed")
            return False
        return True

    def _frame(self, event: Event) -> str:
        if isinstance(event, Done):
            return sse_frame(event.frame(message_id=str(self.plan.message_id)))
        return sse_frame(event.frame())

    async def _frames_failed(self) -> bytes:
        """`error` + `done` after a frame could not be built or encoded: the turn is ended (its
        reply stored, interrupted unless it had already finished) and `done` says what was stored."""
        logger.exception("a chat frame could not be sent; ending the stream")
        if not self.task.done():
            self.task.cancel()
        await asyncio.wait({self.task})
        recorder = self.recorder
        done = recorder.done or Done(full_text=recorder.reply_text, interrupted=True)
        if recorder.interrupted and not done.interrupted:
            done = replace(done, interrupted=True)
        error = self._frame(Error(GENERAL, FRAME_FAILED_MESSAGE))
        try:
            return (error + self._frame(done)).encode()
        except Exception:  # noqa: BLE001 - whatever broke the frame is in `done` too: send it bare
            return (error + self._frame(Done(full_text="", interrupted=recorder.interrupted))).encode()

    async def frames(self) -> AsyncIterator[bytes]:
        """`session` first, the turn's frames, `done` last; `: ping` every SSE_PING_SEC of silence.

        Frames are encoded here, not by the response, so that a frame that cannot be built or
        encoded still ends the stream properly (`error` + `done`) instead of breaking it after
        the headers went out."""
        request_id_set(self.plan.ctx.request_id)
        ping_sec = settings.SSE_PING_SEC
        finished = False
        try:
            yield sse_frame(
                {
                    "type": "session",
                    "conversation_id": str(self.plan.conversation_id),
                    "message_id": str(self.plan.message_id),
                    "request_id": self.plan.ctx.request_id,
                }
            ).encode()
            while not finished:
                try:
                    async with asyncio.timeout(ping_sec):
                        batch = [await self.queue.get()]
                except TimeoutError:
                    yield _PING
                    continue
                # Whatever queued up meanwhile goes out in the same write: under load this saves
                # a socket write per frame, and it never delays a frame that is ready.
                while not self.queue.empty():
                    batch.append(self.queue.get_nowait())
                if _END in batch:
                    finished = True
                    batch = batch[: batch.index(_END)]
                if batch:
                    parts = []
                    for item in batch:
                        try:
                            parts.append(self._frame(item).encode())
                        except Exception:  # noqa: BLE001 - a bug, not the text (sse_frame cleans that)
                            parts.append(await self._frames_failed())
                            finished = True
                            break
                    yield b"".join(parts)
        finally:
            # Client gone (CancelledError here, or GeneratorExit when the server closes us):
            # end the turn; the task stores the partial reply before it finishes.
            if not finished and not self.task.done():
                self.task.cancel()
            await asyncio.wait({self.task})
