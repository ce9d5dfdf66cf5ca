"""The run's one lifecycle (issue 19): every legal move, illegal ones refused, stop in every state,
and a run resumed after approval admitted like a new turn (slot lease and quota).

The database moves are chat_app.runs.state (RUN_MOVES); the event loop's are
chat_app.runs.engine. Across two workers with Redis: test_runs_workers.py and
test_approvals_workers.py.
"""
import itertools
from datetime import timedelta

import httpx
import pytest
from django.core.cache import cache
from django.utils import timezone

from chat_app.models import Conversation, Message, Run, Wait
from chat_app.runs.lease import stream_slots_held
from chat_app.runs.recording import RowSpec
from chat_app.runs.state import (
    RUN_MOVES,
    IllegalMove,
    State,
    _move,
    run_create,
    run_finish,
    run_move_check,
    run_pause,
    run_resume_claim,
    run_waiting_close,
    runs_reap,
)
from testkit.polling import wait_for
from testkit.web.sse import read_until

pytestmark = pytest.mark.embedded

LEGAL = {
    (State.RUNNING, State.WAITING), (State.RUNNING, State.FINISHED), (State.RUNNING, State.INTERRUPTED),
    (State.WAITING, State.RUNNING), (State.WAITING, State.INTERRUPTED),
}


def test_the_table_allows_exactly_the_drawn_moves_and_refuses_every_other():
    assert {(source, target) for source, targets in RUN_MOVES.items() for target in targets} == LEGAL
    for source, target in itertools.product(State, State):
        if (source, target) in LEGAL:
            run_move_check(source, target)
        else:
            with pytest.raises(IllegalMove):
                run_move_check(source, target)


@pytest.fixture
def conversation(user, agent):
    return Conversation.objects.create(user=user, agent=agent, title="t")


def _slot(conversation) -> str:
    """A free stream slot of the run's user, held as a run's lease holds one (chat_app.runs.lease)."""
    return next(key for i in range(3) if cache.add(key := f"chat:streams:{conversation.user_id}:{i}", "a test's run", 60))


def _new_run(conversation) -> Run:
    return run_create(conversation=conversation, user=conversation.user, request_id="0123456789abcdef",
                      agent_name="小智", slot_key=_slot(conversation))


def test_a_run_walks_every_state_through_the_services_and_an_illegal_move_is_refused(conversation):
    run = _new_run(conversation)
    assert run.status == State.RUNNING and run.slot_key
    assert run_pause(run=run, rows=[], state={"rounds": 1}, frames_seq=3)
    run.refresh_from_db()
    assert (run.status, run.worker, run.slot_key, run.frames_seq) == (State.WAITING, "", "", 3)
    assert not run_finish(run=run, rows=[], interrupted=False)  # a waiting run is not finished by its (gone) task
    slot = _slot(conversation)
    assert run_resume_claim(run_id=run.id, slot_key=slot)
    run.refresh_from_db()
    assert (run.status, run.slot_key) == (State.RUNNING, slot)
    assert not run_resume_claim(run_id=run.id, slot_key=slot)  # claimed once
    final = RowSpec(role="assistant", content="好了", meta={}, is_final=True)
    assert run_finish(run=run, rows=[final], interrupted=False)
    run.refresh_from_db()
    assert run.status == State.FINISHED and run.ended_at is not None
    assert Message.objects.get(id=run.message_id).content == "好了"
    assert not run_finish(run=run, rows=[final], interrupted=True)  # ended once: nothing written again
    assert run_waiting_close(run_id=run.id, rows_for=lambda r: []) is None
    with pytest.raises(IllegalMove):
        _move(run.id, source=(State.FINISHED,), target=State.RUNNING)
    assert Run.objects.get(id=run.id).status == State.FINISHED


def test_a_waiting_run_is_closed_and_a_running_one_of_a_dead_worker_reaped(conversation):
    waiting = _new_run(conversation)
    run_pause(run=waiting, rows=[], state={}, frames_seq=1)
    closed = run_waiting_close(run_id=waiting.id, rows_for=lambda r: [RowSpec(role="assistant", content="", meta={
        "interrupted": True}, is_final=True)])
    assert closed is not None and closed.status == State.INTERRUPTED

    dead = _new_run(conversation)
    Run.objects.filter(id=dead.id).update(heartbeat_at=timezone.now() - timedelta(seconds=60), partial_text="一半")
    assert stream_slots_held(user_id=conversation.user_id) >= 1
    assert [r.id for r in runs_reap(stale_sec=10)] == [dead.id]
    dead.refresh_from_db()
    assert dead.status == State.INTERRUPTED and dead.slot_key == ""
    assert Message.objects.get(id=dead.message_id).content == "一半"
    assert runs_reap(stale_sec=10) == []  # reaped once


# --- the live server: stop in every state, the resumed run's admission -------------------------

live_db = pytest.mark.django_db(transaction=True)


def _stop(base, run_id, headers):
    return httpx.post(f"{base}/api/v1/runs/{run_id}/stop", headers=headers, timeout=10)


def _decide(base, run_id, call_id, headers, decision="approve"):
    return httpx.post(f"{base}/api/v1/runs/{run_id}/approvals", json={"call_id": call_id, "decision": decision},
                      headers=headers, timeout=10)


def _asked(base, headers, message="订午饭") -> tuple[str, str]:
    """Asks, reads up to `approval_required` and leaves: (run id, call id)."""
    with httpx.Client(base_url=base, timeout=15) as client:
        with client.stream("POST", "/api/v1/chat", json={"message": message}, headers=headers) as response:
            blocks, _ = read_until(response, lambda f: f["type"] == "approval_required")
    return blocks[0][1]["run_id"], blocks[-1][1]["call_id"]


@pytest.fixture
def asking_canteen(sub_agent):
    sub_agent.approval_policy = "ask"
    sub_agent.save()
    return sub_agent


@live_db
def test_stop_answers_for_a_run_of_another_worker_it_cannot_reach_and_ends_a_dead_ones(
    live_asgi, agent, user, auth_headers
):
    conversation = Conversation.objects.create(user=user, agent=agent, title="t")
    elsewhere = Run.objects.create(conversation=conversation, user=user, worker="other-host:1:abc",
                                   heartbeat_at=timezone.now())
    answer = _stop(live_asgi, elsewhere.id, auth_headers)
    assert answer.status_code == 409 and answer.json()["code"] == 40904  # no Redis to reach it: said so
    assert Run.objects.get(id=elsewhere.id).status == State.RUNNING

    Run.objects.filter(id=elsewhere.id).update(heartbeat_at=timezone.now() - timedelta(minutes=5))
    answer = _stop(live_asgi, elsewhere.id, auth_headers)
    assert (answer.status_code, answer.json()) == (202, {"status": "stopping"})  # its worker is dead: ended here
    assert Run.objects.get(id=elsewhere.id).status == State.INTERRUPTED
    assert (_stop(live_asgi, elsewhere.id, auth_headers).json()) == {"status": "finished"}


@live_db
def test_stop_of_a_waiting_run_ends_it_and_its_calls_are_stored_as_not_run(
    live_asgi, llm_settings, agent, asking_canteen, auth_headers
):
    llm_settings.reply_tool_calls(("call_canteen", {"message": "订午饭"}))
    run_id, call_id = _asked(live_asgi, auth_headers)
    assert (_stop(live_asgi, run_id, auth_headers).status_code) == 202
    run = Run.objects.get(id=run_id)
    assert run.status == State.INTERRUPTED
    assert Wait.objects.get(run=run, call_id=call_id).status == Wait.Status.CANCELLED
    assert _stop(live_asgi, run_id, auth_headers).json() == {"status": "finished"}
    assert _decide(live_asgi, run_id, call_id, auth_headers).status_code == 409


@live_db
def test_an_approval_that_would_resume_past_the_stream_limit_is_refused_and_the_run_keeps_waiting(
    live_asgi, llm_settings, agent, asking_canteen, auth_headers, settings, user
):
    """The bypass of issue 19: resumed runs ran without a slot. Limit 2, three paused runs
    approved one after the other while the resumed ones still run: the third gets 429 42901, its
    call stays pending, and it goes on once a slot is free."""
    settings.CHAT_MAX_CONCURRENT_STREAMS = 2
    llm_settings.responder = None
    asked = []
    for message in ("订午饭", "订晚饭", "订早饭"):
        llm_settings.reply_tool_calls(("call_canteen", {"message": message}))
        asked.append(_asked(live_asgi, auth_headers, message))
    assert stream_slots_held(user_id=user.pk) == 0  # waiting runs hold none
    llm_settings.reply_text("第一份", hang_after_chunks=1)  # the resumed runs keep their slots
    llm_settings.reply_text("第二份", hang_after_chunks=1)
    for run_id, call_id in asked[:2]:
        answer = _decide(live_asgi, run_id, call_id, auth_headers)
        assert (answer.status_code, answer.json()["resumed"]) == (200, True)
    wait_for(lambda: len(llm_settings.requests) == 5, what="both resumed runs asking the model again")
    assert stream_slots_held(user_id=user.pk) == 2

    run_id, call_id = asked[2]
    refused = _decide(live_asgi, run_id, call_id, auth_headers)
    assert refused.status_code == 429 and refused.json()["code"] == 42901
    assert Run.objects.get(id=run_id).status == State.WAITING
    assert Wait.objects.get(run_id=run_id, call_id=call_id).status == Wait.Status.PENDING
    assert stream_slots_held(user_id=user.pk) == 2

    assert _stop(live_asgi, asked[0][0], auth_headers).status_code == 202
    wait_for(lambda: stream_slots_held(user_id=user.pk) == 1, what="the stopped run's slot back")
    llm_settings.reply_text("第三份")
    answer = _decide(live_asgi, run_id, call_id, auth_headers)
    assert (answer.status_code, answer.json()["resumed"]) == (200, True)
    wait_for(lambda: Run.objects.get(id=run_id).status == State.FINISHED, what="the third run's end")
    _stop(live_asgi, asked[1][0], auth_headers)
    wait_for(lambda: stream_slots_held(user_id=user.pk) == 0, what="every slot back")


@live_db
def test_an_approval_past_the_daily_quota_is_refused_and_spends_nothing(
    live_asgi, llm_settings, agent, asking_canteen, auth_headers, settings
):
    """The other half of the bypass: a student refused by the quota spent more tokens by
    approving earlier paused runs."""
    settings.USER_DAILY_TOKEN_QUOTA = 100
    llm_settings.reply_tool_calls(("call_canteen", {"message": "订午饭"}), usage={
        "prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15})
    run_id, call_id = _asked(live_asgi, auth_headers)
    llm_settings.reply_text("今天有红烧肉。", usage={"prompt_tokens": 150, "completion_tokens": 10, "total_tokens": 160})
    with httpx.Client(base_url=live_asgi, timeout=15) as client:  # another conversation spends the quota
        assert client.post("/api/v1/chat", json={"message": "吃什么"}, headers=auth_headers).status_code == 200
    wait_for(lambda: Run.objects.filter(status=State.FINISHED).count() == 1, what="the spending turn's end")
    requests_before = len(llm_settings.requests)

    refused = _decide(live_asgi, run_id, call_id, auth_headers)
    assert refused.status_code == 429 and refused.json()["code"] == 42904 and refused.headers["Retry-After"]
    assert len(llm_settings.requests) == requests_before  # the model was not asked again
    assert Run.objects.get(id=run_id).status == State.WAITING
    assert Wait.objects.get(run_id=run_id, call_id=call_id).status == Wait.Status.PENDING
