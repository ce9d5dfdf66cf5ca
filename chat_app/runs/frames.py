"""The frame log a run keeps in the memory of the worker that runs it.

Frame n (1-based, the SSE `id:`) is `frames[n - 1]`, already encoded as SSE bytes, so a follower
on this worker replays and follows by slicing a list: no copy per follower, no queue per
follower, no encoding per follower. Followers that wait park on one future each, woken by the
next append; an append with nobody waiting costs a list append.
"""
import asyncio

from campus_agent.sse import PING_FRAME

_PING = PING_FRAME.encode()


class FrameLog:
    __slots__ = ("frames", "ended", "_waiters")

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.ended = False
        self._waiters: list[asyncio.Future] = []

    @property
    def last_seq(self) -> int:
        return len(self.frames)

    def append(self, frame: bytes) -> int:
        self.frames.append(frame)
        self._wake()
        return len(self.frames)

    def end(self) -> None:
        self.ended = True
        self._wake()

    def _wake(self) -> None:
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    async def _wait_beyond(self, seq: int, timeout: float) -> bool:
        """True once frames beyond `seq` exist or the log ended; False after `timeout` of silence."""
        if len(self.frames) > seq or self.ended:
            return True
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

    async def follow(self, *, after: int, ping_sec: float):
        """The frames after seq `after`, joined per write, then live until the log ends; `: ping`
        after `ping_sec` of silence."""
        cursor = max(after, 0)
        while True:
            if len(self.frames) > cursor:
                batch = self.frames[cursor:]
                cursor += len(batch)
                yield b"".join(batch)
                continue
            if self.ended:
                return
            if not await self._wait_beyond(cursor, ping_sec):
                yield _PING
