"""The run bus: how a run's frames and its stop signal reach whoever follows or stops it.

One small interface, chosen once at start (as Django picks a cache backend), never asked "is
Redis there?" at a call site:

- `open(run_id, base=)` → the run's `RunWriter` (append a frame, end, pause), on the worker
  that runs it; a run resumed here after a pause writes on in the log it paused;
- `read(run_id, after=, timeout=)` → a `Batch`: the frames after seq `after`, waiting up to
  `timeout` for the first;
- `end_with(run_id, payloads)` → ends the log of a run that ended while no worker ran it (reaped,
  or closed while it waited for a person) with these frames, the last its `done`, so that its
  followers get their end;
- `stop_publish(run_id)` → asks the worker that runs the run to stop it; False when this bus
  cannot reach other workers;
- `listen(on_stop)` → calls `on_stop(run_id)` for every stop asked anywhere, until cancelled.

`MemoryBus` (the embedded default, one worker) keeps each log in this process (runs.frames).
`RedisBus` (REDIS_URL) keeps the same logs for this worker's own followers and copies every
frame into the run's Redis Stream, which followers on other workers read (runs.redis_bus); a
stop travels over pub/sub. Neither reads the database for frames: a log that has expired is
answered from the stored reply by the follower (runs.follow).
"""
import asyncio
from dataclasses import dataclass

from django.conf import settings
from loguru import logger
from redis.exceptions import RedisError

from campus_agent.base.redis_clients import redis_client
from campus_agent.base.sse import sse_frame
from chat_app.runs import redis_bus
from chat_app.runs.frames import FrameLog


@dataclass(frozen=True, slots=True)
class Batch:
    frames: bytes | str  # SSE text of the frames, joined ("" when none came)
    last_seq: int  # the seq of the last of them (the cursor when none came)
    ended: bool  # the log's end is among them, or the cursor is at its end
    known: bool  # some log of the run exists (False: expired, or it never reached this bus)
    live: bool = False  # a writer in this process is appending to it now


class RunWriter:
    """The writer's side of one run's log on this worker."""

    def __init__(self, log: FrameLog) -> None:
        self.log = log

    @property
    def last_seq(self) -> int:
        return self.log.last_seq

    def append(self, frame: bytes, *, end: bool = False) -> None:
        self.log.append(frame)
        if end:
            self.log.end()

    async def pause(self) -> None:
        """The run waits for a person: whichever worker resumes it appends next."""
        self.log.pause()

    async def ended(self) -> None:
        """Every frame appended has reached the bus (bounded)."""


FORGOTTEN_KEPT = 10_000


class MemoryBus:
    """Logs in this process; followers and stops of this process only."""

    reaches_other_workers = False

    def __init__(self) -> None:
        self._logs: dict = {}  # run id → FrameLog
        self._forget_at: dict = {}  # run id → TimerHandle
        self._appeared: dict = {}  # run id → futures of followers waiting for its first log
        # Runs whose log this process held and has forgotten (bounded): a follower that comes
        # after is told at once that there is no log, instead of waiting for one to appear.
        self._forgotten: dict = {}

    def local_log(self, run_id) -> FrameLog | None:
        return self._logs.get(run_id)

    def _log_open(self, run_id, base: int) -> FrameLog:
        self._forgotten.pop(run_id, None)
        handle = self._forget_at.pop(run_id, None)
        if handle is not None:
            handle.cancel()
        log = self._logs.get(run_id)
        if log is not None and not log.ended:  # paused here: its followers stay on it
            log.pause(False)
            return log
        log = self._logs[run_id] = FrameLog(base=base)
        for waiter in self._appeared.pop(run_id, []):
            if not waiter.done():
                waiter.set_result(None)
        return log

    def open(self, run_id, *, base: int) -> RunWriter:
        return RunWriter(self._log_open(run_id, base))

    def retain(self, run_id, seconds: float) -> None:
        """Forgets the run's log `seconds` from now (its end, or its pause, has been written)."""
        handle = self._forget_at.pop(run_id, None)
        if handle is not None:
            handle.cancel()
        self._forget_at[run_id] = asyncio.get_running_loop().call_later(seconds, self.forget, run_id)

    def forget(self, run_id) -> None:
        """Drops the run's log from this process (its retention ran out)."""
        self._forget_at.pop(run_id, None)
        if self._logs.pop(run_id, None) is not None:
            self._forgotten[run_id] = None
            if len(self._forgotten) > FORGOTTEN_KEPT:
                del self._forgotten[next(iter(self._forgotten))]

    async def _appearance(self, run_id, timeout: float) -> FrameLog | None:
        log = self._logs.get(run_id)
        if log is not None or timeout <= 0 or run_id in self._forgotten:
            return log
        waiter = asyncio.get_running_loop().create_future()
        self._appeared.setdefault(run_id, []).append(waiter)
        try:
            async with asyncio.timeout(timeout):
                await waiter
        except TimeoutError:
            pass
        finally:
            waiters = self._appeared.get(run_id)
            if waiters is not None and waiter in waiters:
                waiters.remove(waiter)
                if not waiters:
                    self._appeared.pop(run_id, None)
        return self._logs.get(run_id)

    async def read(self, run_id, *, after: int, timeout: float) -> Batch:
        log = await self._appearance(run_id, timeout)
        if log is None:
            return Batch("", after, ended=False, known=False)
        frames, last, ended = await log.read(after=after, timeout=timeout)
        return Batch(frames, last, ended=ended, known=True, live=not log.ended and not log.paused)

    async def end_with(self, run_id, payloads: list[dict], *, base: int = 0) -> None:
        log = self._logs.get(run_id)
        if log is None or log.ended:
            log = self._log_open(run_id, base)
        _log_close(log, payloads)
        self.retain(run_id, settings.RUN_LOG_RETAIN_SEC)

    async def stop_publish(self, run_id) -> bool:
        return False

    async def listen(self, on_stop) -> None:
        return None


def _log_close(log: FrameLog, payloads: list[dict]) -> None:
    for payload in payloads:
        log.append(sse_frame(payload, event_id=log.last_seq + 1).encode())
    log.end()


class _MirroredWriter(RunWriter):
    def __init__(self, log: FrameLog, mirror: redis_bus.RedisMirror) -> None:
        super().__init__(log)
        self._mirror = mirror

    def append(self, frame: bytes, *, end: bool = False) -> None:
        seq = self.log.last_seq + 1
        super().append(frame, end=end)
        self._mirror.push(seq, frame, end=end)

    async def pause(self) -> None:
        await super().pause()
        await self._mirror.drained()
        await self._mirror.hold(settings.APPROVAL_TIMEOUT_SEC)

    async def ended(self) -> None:
        await self._mirror.drained()


class RedisBus(MemoryBus):
    """This worker's logs as in MemoryBus, each copied into the run's Redis Stream; followers of
    a run this worker does not write read the Stream; stops travel over pub/sub."""

    reaches_other_workers = True

    def open(self, run_id, *, base: int) -> RunWriter:
        log = self._log_open(run_id, base)
        mirror = redis_bus.RedisMirror(redis_client(), run_id, after_seq=log.last_seq)
        return _MirroredWriter(log, mirror)

    async def read(self, run_id, *, after: int, timeout: float) -> Batch:
        log = self._logs.get(run_id)
        if log is not None and not log.paused and after >= log.base:  # written here (or ended here)
            frames, last, ended = await log.read(after=after, timeout=timeout)
            return Batch(frames, last, ended=ended, known=True, live=not log.ended)
        client = redis_client(reads=True)  # XREAD BLOCK holds its connection: never the commands' pool
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            if timeout <= 0:
                frames, last, ended = await redis_bus.log_replay(client, run_id, after=after)
            else:
                while True:
                    block = min(max(deadline - loop.time(), 0.001), redis_bus.REDIS_BLOCK_SEC)
                    frames, last, ended = await redis_bus.log_read(client, run_id, after=after, block_sec=block)
                    if frames or loop.time() >= deadline:
                        break
            known = bool(frames) or log is not None or bool(await client.exists(redis_bus.log_key(run_id)))
        except RedisError as exc:
            logger.warning("reading run {} from Redis failed: {}", run_id, exc)
            await asyncio.sleep(min(timeout, 1.0))
            return Batch("", after, ended=False, known=False)
        return Batch(frames, last if frames else after, ended=ended, known=known)

    async def end_with(self, run_id, payloads: list[dict], *, base: int = 0) -> None:
        log = self._logs.get(run_id)
        if log is not None and not log.ended:
            _log_close(log, payloads)
        await redis_bus.log_append_end(
            redis_client(), run_id,
            lambda first: [sse_frame(payload, event_id=first + i) for i, payload in enumerate(payloads)])

    async def stop_publish(self, run_id) -> bool:
        try:
            await redis_bus.control_publish(redis_client(), op="stop", run_id=run_id)
        except RedisError as exc:
            logger.warning("asking the workers to stop run {} failed: {}", run_id, exc)
            return False
        return True

    async def listen(self, on_stop) -> None:
        await redis_bus.control_listen(redis_client(), lambda op, run_id: on_stop(run_id) if op == "stop" else None)


_buses: dict[str, MemoryBus] = {}


def run_bus() -> MemoryBus:
    """This process's bus: Redis with REDIS_URL, else memory (chosen once per setting)."""
    url = settings.REDIS_URL or ""
    bus = _buses.get(url)
    if bus is None:
        bus = _buses[url] = RedisBus() if url else MemoryBus()
    return bus
