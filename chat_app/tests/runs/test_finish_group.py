"""Issue 46 step 3: the ends of runs that come together are stored together (group commit,
campus_agent.base.group_commit), and each run still gets its own outcome: a group whose
transaction fails (the database itself refuses one run's rows: a trigger) is stored run by run,
the others whole, the refused one's error its own; a run the reaper ended stores nothing.

Real database threads (campus_agent.base.asyncdb) and the engine's own `FINISHES`; the groups are
watched by wrapping its `many` (the real `runs_finish`), never by replacing it."""
import asyncio

import pytest

from campus_agent.base import group_commit
from campus_agent.base.group_commit import GroupCommit
from chat_app.models import Conversation, Message, Run
from chat_app.runs.engine import FINISHES
from chat_app.runs.recording import RowSpec
from chat_app.runs.state import Finish, State, run_create
from testkit.group_commit import all_at_once, group_commit_watched
from testkit.refused_rows import rows_refused

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.embedded]

REFUSED = "不能存的回答"


def _runs(user, agent, count: int) -> list[Run]:
    """`count` running runs, each in its own conversation (one active run per conversation)."""
    return [run_create(conversation=Conversation.objects.create(user=user, agent=agent, title=f"对话{i}"), user=user,
                       request_id=f"{i:016x}", agent_name="小智", slot_key="")
            for i in range(count)]


def _finish(run: Run, text: str) -> Finish:
    return Finish(run=run, rows=[RowSpec(role="assistant", content=text, meta={}, is_final=True)], interrupted=False)


def _watched(groups: list[int]) -> GroupCommit:
    return group_commit_watched(FINISHES, groups)


def _reply(run: Run) -> Message | None:
    return Message.objects.filter(id=run.message_id).first()


def test_ends_that_come_together_are_one_group_each_with_its_own_outcome(user, agent):
    runs = _runs(user, agent, 5)
    Run.objects.filter(id=runs[2].id).update(status=State.INTERRUPTED)  # the reaper got there first
    groups: list[int] = []
    outcomes = all_at_once(_watched(groups), [_finish(run, f"回答{i}") for i, run in enumerate(runs)])
    assert groups == [5]  # one crossing, one transaction
    assert outcomes == [True, True, False, True, True]
    for i, run in enumerate(runs):
        run.refresh_from_db()
        if i == 2:
            assert run.status == State.INTERRUPTED and _reply(run) is None  # nothing written for it
        else:
            assert run.status == State.FINISHED and _reply(run).content == f"回答{i}"


def test_a_group_whose_transaction_fails_is_stored_run_by_run(user, agent):
    runs = _runs(user, agent, 3)
    groups: list[int] = []
    with rows_refused(f"NEW.content = '{REFUSED}'"):
        outcomes = all_at_once(_watched(groups), [_finish(runs[0], "第一"), _finish(runs[1], REFUSED),
                                                    _finish(runs[2], "第三")])
    assert groups == [3, 1, 1, 1]  # the group failed as a whole, then each alone …
    assert outcomes[0] is True and outcomes[2] is True  # … the others stored as if alone
    assert "refused by the test" in str(outcomes[1])  # the refused one's error is its own
    statuses = {run.id: status for run, status in
                ((run, Run.objects.get(id=run.id).status) for run in runs)}
    assert statuses == {runs[0].id: State.FINISHED, runs[1].id: State.RUNNING, runs[2].id: State.FINISHED}
    assert _reply(runs[0]).content == "第一" and _reply(runs[2]).content == "第三"
    assert _reply(runs[1]) is None  # the engine stores its text alone next (test_finish_store.py)


def test_ends_that_come_while_a_group_is_written_form_the_next_group(user, agent):
    runs = _runs(user, agent, 4)
    groups: list[int] = []
    commit = _watched(groups)

    async def two_waves():
        first = [asyncio.ensure_future(commit(_finish(run, "早"))) for run in runs[:2]]
        await asyncio.sleep(0)  # the first group is on its way to a database thread
        later = [asyncio.ensure_future(commit(_finish(run, "晚"))) for run in runs[2:]]
        return await asyncio.gather(*first, *later)

    assert asyncio.run(two_waves()) == [True] * 4
    assert groups == [2, 2]


def test_a_caller_that_stops_waiting_leaves_its_end_stored(user, agent):
    (run,) = _runs(user, agent, 1)

    async def cancelled_caller():
        waiting = asyncio.ensure_future(FINISHES(_finish(run, "还是存了")))
        await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        # The group's write goes on in its own task: waited for, as the loop's other tasks.
        await asyncio.gather(*(task for task in asyncio.all_tasks() if task is not asyncio.current_task()))

    asyncio.run(cancelled_caller())
    assert Run.objects.get(id=run.id).status == State.FINISHED and _reply(run).content == "还是存了"


def test_a_group_holds_at_most_group_max_ends(user, agent, monkeypatch):
    monkeypatch.setattr(group_commit, "GROUP_MAX", 2)  # its transaction holds the write lock: kept short
    runs = _runs(user, agent, 5)
    groups: list[int] = []
    assert all_at_once(_watched(groups), [_finish(run, "答") for run in runs]) == [True] * 5
    assert groups == [2, 2, 1]
