"""Group commit: writes that arrive together cross to the database threads together.

A burst's questions arrive together and its answers end together (1,000 students at once,
docs/benchmarks.md), and each admission or end written alone was a crossing to a database
thread and back, a transaction and its statements, queued behind everyone else's. A
`GroupCommit` collects the calls that arrive in the same turn of the event loop, and those that
arrive while the group before them is being written, and writes each group with one call of
`many` (one crossing, one transaction; bulk statements where the writes allow) on the database
threads. A lone call is written by `one`, as it would be without a group.

Each caller still gets its own outcome. `many` returns one per item, in order, an exception
being that item's own refusal (the others kept); when `many` raises (one item's row refused
undoes the whole transaction), every item of the group is written alone with `one`, so the
others are stored as if they had come alone and the failing one raises its own error to its own
caller (chat_app/tests/runs/test_finish_group.py and test_admission_group.py fail a group).

A caller that is cancelled while its group is written stops waiting, not the write (as with
`db_call`: a call on a thread cannot be stopped half-way). One group is written at a time per
event loop (four at once were slower on PostgreSQL, docs/benchmarks.md): the next one gathers
meanwhile. A group holds at most GROUP_MAX calls: its transaction holds SQLite's write lock (and
PostgreSQL's row locks) while it lasts, and every other writer waits for it.
"""
import asyncio
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

from campus_agent.base.asyncdb import db_call
from campus_agent.base.tasks import background

GROUP_MAX = 100  # ≈ 0.1–0.3 s of a transaction here (a run's end 1.1 ms on SQLite, an admission 1–3 ms)
T = TypeVar("T")
R = TypeVar("R")


class _Gathering:
    __slots__ = ("waiting", "writing")

    def __init__(self):
        self.waiting: list[tuple[object, asyncio.Future]] = []
        self.writing = False


class GroupCommit(Generic[T, R]):
    def __init__(self, many: Callable[[list[T]], list[R]], one: Callable[[T], R]):
        self._many, self._one = many, one
        # Per event loop: a future belongs to its loop (the test suite runs several).
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Gathering] = weakref.WeakKeyDictionary()

    async def __call__(self, item: T) -> R:
        loop = asyncio.get_running_loop()
        gathering = self._loops.get(loop)
        if gathering is None:
            gathering = self._loops[loop] = _Gathering()
        future = loop.create_future()
        gathering.waiting.append((item, future))
        if not gathering.writing:
            gathering.writing = True
            # A new task's first step comes after the callbacks already due in this turn of the
            # loop: the calls they make join this group.
            background(self._groups_write(gathering))
        return await future

    async def _groups_write(self, gathering: _Gathering) -> None:
        try:
            while gathering.waiting:
                group, gathering.waiting = gathering.waiting[:GROUP_MAX], gathering.waiting[GROUP_MAX:]
                try:
                    await self._group_write(group)
                finally:
                    for _, future in group:  # cancelled (the loop shutting down) or a bug: nobody waits forever
                        future.cancel()
        finally:
            gathering.writing = False

    async def _group_write(self, group: list[tuple[T, asyncio.Future]]) -> None:
        if len(group) > 1:
            try:
                outcomes = await db_call(self._many, [item for item, _ in group])
            except Exception:
                pass  # the group's transaction failed as a whole: each item is written alone below
            else:
                for (_, future), outcome in zip(group, outcomes, strict=True):
                    if isinstance(outcome, Exception):  # refused on its own, the group's transaction kept
                        _settle(future, error=outcome)
                    else:
                        _settle(future, outcome=outcome)
                return
        for item, future in group:  # a lone call is written as it would be without a group
            try:
                outcome = await db_call(self._one, item)
            except Exception as error:
                _settle(future, error=error)
            else:
                _settle(future, outcome=outcome)


def _settle(future: asyncio.Future, *, outcome=None, error: BaseException | None = None) -> None:
    if future.done():  # its caller was cancelled and went
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(outcome)
