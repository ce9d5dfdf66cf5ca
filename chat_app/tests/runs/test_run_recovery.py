"""A run whose worker died is finished as interrupted from what was persisted (docs/design.md#runs)."""
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.core.cache import cache
from django.utils import timezone

from agents_app.runtime.events import Chunk, ToolCall, ToolResult
from chat_app.models import Conversation, Message, Run
from chat_app.runs.engine import runs_reap_stale
from chat_app.runs.recording import TurnRecorder
from chat_app.runs.state import WORKER_LOST_MESSAGE, run_rows_store, runs_heartbeat, runs_reap

pytestmark = pytest.mark.embedded


@pytest.fixture
def conversation(user, agent):
    conversation = Conversation.objects.create(user=user, agent=agent, title="食堂")
    Message.objects.create(conversation=conversation, role="user", content="食堂吃啥")
    return conversation


def _run(conversation, **fields) -> Run:
    """A running run of `conversation`, or of a copy of it when it runs one already (one run per
    conversation at a time)."""
    if Run.objects.filter(conversation=conversation, status__in=Run.ACTIVE).exists():
        conversation = Conversation.objects.create(user=conversation.user, agent=conversation.agent, title="另一个")
    defaults = {"worker": "dead-host:1:abc", "heartbeat_at": timezone.now(), "agent_name": "小智"}
    return Run.objects.create(conversation=conversation, user=conversation.user, **{**defaults, **fields})


@pytest.mark.django_db(transaction=True)  # the reaper's sweep reads and writes on the database threads
async def test_a_stale_run_is_finished_with_its_checkpointed_text_and_slot_freed(conversation):
    cache.set("chat:streams:1:0", "owner", 300)
    stale = await sync_to_async(_run)(conversation, heartbeat_at=timezone.now() - timedelta(seconds=30),
                                      partial_text="说到一半", slot_key="chat:streams:1:0")
    fresh = await sync_to_async(_run)(conversation, worker="alive:2:def")

    reaped = await runs_reap_stale()  # the supervisor's sweep

    assert [r.id for r in reaped] == [stale.id]
    stale, fresh = await Run.objects.aget(id=stale.id), await Run.objects.aget(id=fresh.id)
    assert stale.status == Run.Status.INTERRUPTED and stale.ended_at and stale.partial_text == ""
    assert fresh.status == Run.Status.RUNNING
    reply = await Message.objects.aget(id=stale.message_id)
    assert reply.content == "说到一半" and reply.role == "assistant"
    assert reply.meta == {"interrupted": True, "errors": [{"code": 50002, "message": WORKER_LOST_MESSAGE}]}
    assert cache.get("chat:streams:1:0") is None  # its slot given back, by the key its row kept
    assert await runs_reap_stale() == []  # claimed once: a second reaper finds nothing


def test_finished_tool_rounds_are_stored_while_the_run_goes_on(conversation):
    """The rows a run stores as each round finishes keep the conversation usable after a crash:
    no `tool_calls` row without its tool rows."""
    recorder = TurnRecorder()
    for event in (Chunk("我查一下。"), ToolCall("c1", "call_canteen", "{}"), ToolCall("c2", "tools__add", "{}"),
                  ToolResult("c1", "call_canteen", True, "红烧肉")):
        recorder.add(event)
    assert recorder.finished_rounds_take() == []  # c2 still runs
    assert recorder.unsaved_text == "我查一下。"
    recorder.add(ToolResult("c2", "tools__add", True, "3"))
    rows = recorder.finished_rounds_take()
    assert [r.role for r in rows] == ["assistant", "tool", "tool"]
    assert recorder.unsaved_text == ""
    recorder.add(Chunk("今天有"))
    recorder.add(ToolCall("c3", "call_canteen", "{}"))  # a second round, cut by the crash
    assert recorder.unsaved_text == "今天有"

    # The last heartbeat checkpointed the first round's text; storing the round replaces the
    # checkpoint in the same transaction, so the reaper does not store that text a second time.
    run = _run(conversation, heartbeat_at=timezone.now() - timedelta(seconds=30), partial_text="我查一下。")
    run_rows_store(run=run, rows=rows, unsaved_text="")
    run.refresh_from_db()
    assert run.partial_text == ""
    Run.objects.filter(id=run.id).update(partial_text=recorder.unsaved_text)  # the next heartbeat
    runs_reap(stale_sec=10)

    stored = list(Message.objects.filter(conversation=conversation).order_by("created_at", "seq"))
    assert [m.role for m in stored] == ["user", "assistant", "tool", "tool", "assistant"]
    assert stored[1].meta["tool_calls"][1]["id"] == "c2"
    assert stored[-1].content == "今天有" and stored[-1].meta["interrupted"] is True
    # rows() leaves out the rounds already taken: a normal end stores only what is left
    assert [r.role for r in recorder.rows()] == ["assistant", "tool", "assistant"]


def test_heartbeat_refreshes_only_this_workers_runs_and_saves_changed_text(conversation):
    old = timezone.now() - timedelta(seconds=30)
    mine = _run(conversation, worker="me", heartbeat_at=old)
    other = _run(conversation, worker="other", heartbeat_at=old)
    runs_heartbeat(worker="me", checkpoints={mine.id: "新的文字"})
    mine.refresh_from_db()
    other.refresh_from_db()
    assert mine.heartbeat_at > old and mine.partial_text == "新的文字"
    assert other.heartbeat_at == old and other.partial_text == ""


@pytest.mark.django_db(transaction=True)
async def test_a_worker_warns_when_another_one_runs_runs_without_redis(conversation, settings, monkeypatch):
    from loguru import logger

    from chat_app.runs import supervisor

    settings.REDIS_URL = ""
    monkeypatch.delenv("WEB_CONCURRENCY", raising=False)
    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(str(message)), level="WARNING")
    try:
        await supervisor._warn_without_redis()
        assert not any("REDIS_URL" in line for line in lines)  # alone: nothing to say
        await Run.objects.acreate(conversation=conversation, user=conversation.user, worker="other-host:9:abc",
                                  heartbeat_at=timezone.now())
        await supervisor._warn_without_redis()
        assert any("several workers" in line and "REDIS_URL" in line for line in lines)
    finally:
        logger.remove(sink)


@pytest.mark.django_db(transaction=True)
async def test_the_heartbeat_is_not_queued_behind_the_stream_paths_database_calls(conversation, monkeypatch):
    """A burst's admissions fill the database threads; the beat that keeps this worker's runs
    alive must not wait for them (it waited 6.3 s behind 1,000 on PostgreSQL: a beat later than
    RUN_STALE_SEC lets any worker's reaper end live runs)."""
    import asyncio
    import threading
    from types import SimpleNamespace

    from campus_agent.base.asyncdb import DB_THREADS, db_call
    from chat_app.runs import supervisor
    from chat_app.runs.state import WORKER_ID

    old = timezone.now() - timedelta(seconds=30)
    run = await Run.objects.acreate(conversation=conversation, user=conversation.user, worker=WORKER_ID,
                                    heartbeat_at=old, agent_name="小智")
    monkeypatch.setitem(supervisor.local_runs, run.id, SimpleNamespace(
        active=True, recorder=SimpleNamespace(unsaved_text="说到一半"), checkpointed=""))
    busy, release = threading.Barrier(DB_THREADS + 1), threading.Event()

    def admission_in_progress() -> None:
        busy.wait(timeout=10)
        release.wait(timeout=30)

    holders = [asyncio.ensure_future(db_call(admission_in_progress)) for _ in range(DB_THREADS)]
    try:
        await asyncio.to_thread(busy.wait, 10)  # every database thread is taken
        await asyncio.wait_for(supervisor._beat(), timeout=20)
        await run.arefresh_from_db()
        assert run.heartbeat_at > old and run.partial_text == "说到一半"
        assert not any(holder.done() for holder in holders)  # the beat did not wait for them
    finally:
        release.set()
        await asyncio.gather(*holders)
