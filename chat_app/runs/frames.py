"""The frame log a run keeps in the memory of the worker that runs it (chat_app.runs.bus).

Frame n (1-based, the SSE `id:`) is `frames[n - 1 - base]`, already encoded as SSE bytes (`base`:
the frames a run sent before it paused for approval, on whichever worker), so a follower
on this worker replays and follows by slicing a list: no copy per follower, no queue per
follower, no encoding per follower. Followers that wait park on one future each, woken by the
next append; an append with nobody waiting costs a list append.
"""
import asyncio


class FrameLog:
    __slots__ = ("frames", "base", "ended", "paused", "_waiters")

    def __init__(self, base: int = 0) -> None:
        self.frames: list[bytes] = []
        self.base = base
        self.ended = False
        self.paused = False  # the run waits for a person: whichever worker resumes it appends next
        self._waiters: list[asyncio.Future] = []

    @property
    def last_seq(self) -> int:
        return self.base + len(self.frames)

    def append(self, frame: bytes) -> int:
        self.frames.append(frame)
        self._wake()
        return self.last_seq

    def end(self) -> None:
        self.ended = True
        self._wake()

    def pause(self, paused: bool = True) -> None:
        self.paused = paused
        self._wake()

    def _wake(self) -> None:
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    async def _woken(self, timeout: float) -> bool:
        """True when the log changed (append, end, pause or resume) within `timeout`."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout(timeout):
                await waiter
        except TimeoutError:
            return False
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
        return True

    async def read(self, *, after: int, timeout: float) -> tuple[bytes, int, bool]:
        """The frames after seq `after` (from `base` at the earliest), joined, waiting up to
        `timeout` for the first: (frames, the last one's seq, whether the log has ended there)."""
        cursor = max(after, self.base)
        if self.last_seq <= cursor and not self.ended and timeout > 0:
            await self._woken(timeout)
        if self.last_seq > cursor:
            return b"".join(self.frames[cursor - self.base:]), self.last_seq, self.ended
        return b"", cursor, self.ended
