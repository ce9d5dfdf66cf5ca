"""Group commit: writes that arrive together cross to the database threads together.

A burst's runs end together (1,000 students' answers stream in step, docs/benchmarks.md), and
each end stored alone was a crossing to a database thread and back, a transaction and its
statements. A `GroupCommit` collects the calls that arrive in the same turn of the event loop,
and those that arrive while the group before them is being written, and writes each group with
one call of `many` (one crossing, one transaction, bulk statements) on the database threads.

Each caller still gets its own outcome. `many` returns one per item, in order; when it raises
(one item's rows refused undoes the whole transaction), every item of the group is written
alone with `one`, so the others are stored as if they had come alone and the failing one raises
its own error to its own caller (chat_app/tests/runs/test_finish_group.py fails a group).

A caller that is cancelled while its group is written stops waiting, not the write (as with
`db_call`: a call on a thread cannot be stopped half-way). One group is written at a time per
event loop: the next one gathers meanwhile. A group holds at most GROUP_MAX calls: its
transaction holds SQLite's write lock (and PostgreSQL's row locks) while it lasts, and every
other writer waits for it (the heartbeat, the admissions).
"""
import asyncio
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

from campus_agent.base.asyncdb import db_call
from campus_agent.base.tasks import background

GROUP_MAX = 100  # ≈ 0.1 s of a transaction on this machine (1.1 ms per run's end on SQLite)
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
        try:
            outcomes = await db_call(self._many, [item for item, _ in group])
        except Exception as error:
            if len(group) == 1:  # alone already: its error is its own
                _settle(group[0][1], error=error)
                return
            for item, future in group:
                try:
                    outcome = await db_call(self._one, item)
                except Exception as alone:
                    _settle(future, error=alone)
                else:
                    _settle(future, outcome=outcome)
            return
        for (_, future), outcome in zip(group, outcomes, strict=True):
            _settle(future, outcome=outcome)


def _settle(future: asyncio.Future, *, outcome=None, error: BaseException | None = None) -> None:
    if future.done():  # its caller was cancelled and went
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(outcome)
