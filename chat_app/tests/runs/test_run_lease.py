"""One lease (issue 40 point 3): a run's stream slot is taken in one place and given back in one
place, exactly once, whatever ends the run — a refused admission, a finished, stopped or paused
run, an answer that was not the last, a resumed run, a run reaped after its worker died.

The first test reads the code: `RunLease.__aenter__` is the only code that takes a stream slot
and `RunLease.__aexit__` the only code that releases one. The second counts every take and every
release the live server makes, through the real slot store of the suite's cache."""
import ast
import asyncio
from collections import Counter
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.conf import settings as django_settings
from django.utils import timezone

from chat_app.models import Conversation, Run
from chat_app.runs import lease as lease_module
from chat_app.runs.engine import runs_reap_stale
from chat_app.runs.lease import SLOT_KEY_PREFIX, RunLease, stream_slots_held
from testkit.model.fake_llm import Reply
from testkit.polling import wait_for
from testkit.web.sse import chat, read_until

pytestmark = pytest.mark.embedded

PRODUCT = ("campus_agent", "subagents_app", "agents_app", "chat_app", "insights_app", "demo_app")


def _calls_of(method: str) -> list[str]:
    """`path:function` of every call `<something>.<method>(…)` in product code."""
    root = Path(django_settings.BASE_DIR)
    found = []
    for app in PRODUCT:
        for path in sorted((root / app).rglob("*.py")):
            if "tests" in path.parts or "migrations" in path.parts:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for function in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)):
                for node in ast.walk(function):
                    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == method:
                        found.append(f"{path.relative_to(root).as_posix()}:{function.name}")
    return sorted(set(found))


def test_a_stream_slot_is_taken_in_one_place_and_released_in_one_place():
    assert _calls_of("atake") == ["chat_app/runs/lease.py:__aenter__"]
    # RunLease.__aexit__ gives a stream slot back; FollowerLease.release a follower's key.
    assert _calls_of("arelease") == ["chat_app/runs/lease.py:__aexit__", "chat_app/runs/lease.py:release"]
    # Every lease of a run is entered by an `async with`: the run's task's (engine), the reaper's.
    root = Path(django_settings.BASE_DIR)
    engine = ast.parse((root / "chat_app/runs/engine.py").read_text(encoding="utf-8"))
    entered = [ast.unparse(item.context_expr) for node in ast.walk(engine) if isinstance(node, ast.AsyncWith)
               for item in node.items]
    assert sorted(e for e in entered if "lease" in e.lower()) == ["RunLease.adopted(key=slot_key)", "self.lease"]


class _Counted:
    """The suite's slot store, counting what it is asked: every stream slot taken, every one given back."""

    def __init__(self, store):
        self.store = store
        self.taken: Counter = Counter()
        self.released: Counter = Counter()

    async def atake(self, user_id, *, rate):
        key, within = await self.store.atake(user_id, rate=rate)
        if key:
            self.taken[key] += 1
        return key, within

    async def arelease(self, key):
        if key.startswith(SLOT_KEY_PREFIX):
            self.released[key] += 1
        await self.store.arelease(key)

    def balanced(self) -> bool:
        return self.taken == self.released


@pytest.fixture
def counted(monkeypatch):
    store = _Counted(lease_module._slots())
    monkeypatch.setattr(lease_module, "_slots", lambda: store)
    return store


def _ask(base, headers, message, **body):
    return chat(base, {"message": message, **body}, headers=headers, timeout=15)


@pytest.mark.django_db(transaction=True)
def test_every_ending_gives_each_slot_back_exactly_once(
    live_asgi, llm_settings, agent, sub_agent, auth_headers, user, settings, counted
):
    settings.CHAT_MAX_CONCURRENT_STREAMS = 2
    # Refused after the slot was taken: a conversation that is not the caller's (404), an agent
    # that does not exist (400), the message rate (429 42902), the day's tokens (429 42904).
    assert _ask(live_asgi, auth_headers, "问", conversation_id="00000000-0000-4000-8000-000000000000").status == 404
    assert _ask(live_asgi, auth_headers, "问", agent="nobody").status == 400
    settings.CHAT_RATE_PER_MINUTE = 2
    assert _ask(live_asgi, auth_headers, "问").status == 429
    settings.CHAT_RATE_PER_MINUTE = 100
    settings.USER_DAILY_TOKEN_QUOTA = 10
    llm_settings.reply_text("好。", usage={"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25})
    assert _ask(live_asgi, auth_headers, "花掉额度").status == 200
    assert _ask(live_asgi, auth_headers, "再问").status == 429
    settings.USER_DAILY_TOKEN_QUOTA = 0
    assert counted.taken and counted.balanced()

    # Finished; stopped mid-answer.
    llm_settings.reply_text("答完了。")
    assert _ask(live_asgi, auth_headers, "你好").types[-1] == "done"
    llm_settings.queue(Reply(text="慢慢地说" * 20, chunk_size=2, chunk_delay=0.05))
    with httpx.Client(base_url=live_asgi, timeout=15) as client:
        with client.stream("POST", "/api/v1/chat", json={"message": "说慢点"}, headers=auth_headers) as response:
            blocks, _ = read_until(response, lambda f: f["type"] == "chunk")
            run_id = blocks[0][1]["run_id"]
            assert client.post(f"/api/v1/runs/{run_id}/stop", headers=auth_headers).status_code == 202
    wait_for(lambda: Run.objects.get(id=run_id).status == Run.Status.INTERRUPTED, what="the stopped run's end")

    # Paused for two approvals (its slot given back), one answer that is not the last (a slot
    # taken and given back at once), the last (the resumed run's slot), finished.
    sub_agent.approval_policy = "ask"
    sub_agent.save()
    llm_settings.reply_tool_calls(("call_canteen", {"message": "一食堂"}), ("call_canteen", {"message": "二食堂"}))
    llm_settings.reply_text("都订好了。")
    approvals = []

    def second_approval(frame) -> bool:
        approvals.extend([frame] if frame["type"] == "approval_required" else [])
        return len(approvals) == 2

    with httpx.Client(base_url=live_asgi, timeout=15) as client:
        with client.stream("POST", "/api/v1/chat", json={"message": "订两份"}, headers=auth_headers) as response:
            blocks, _ = read_until(response, second_approval)
    wait_for(lambda: stream_slots_held(user_id=user.pk) == 0, what="the paused run's slot back")
    run_id = blocks[0][1]["run_id"]
    asked = [f["call_id"] for _, f in blocks if f["type"] == "approval_required"]
    for call_id in asked:
        decided = httpx.post(f"{live_asgi}/api/v1/runs/{run_id}/approvals", headers=auth_headers, timeout=10,
                             json={"call_id": call_id, "decision": "approve"})
        assert decided.status_code == 200
    wait_for(lambda: Run.objects.get(id=run_id).status == Run.Status.FINISHED, what="the resumed run's end")
    wait_for(counted.balanced, what="every slot given back")

    # Reaped: a run whose worker died, holding a slot its row names.
    taken_before = sum(counted.taken.values())
    conversation = Conversation.objects.create(user=user, agent=agent, title="t")

    async def a_dead_workers_run():
        lease = RunLease(user_id=user.pk, new_message=False)
        await lease.__aenter__()  # as its task did, before its worker died and left it held
        await sync_to_async(Run.objects.create)(
            conversation=conversation, user=user, worker="dead-host:1:abc", slot_key=lease.key,
            heartbeat_at=timezone.now() - timedelta(minutes=5))
        assert stream_slots_held(user_id=user.pk) == 1
        assert [r.slot_key for r in await runs_reap_stale()] == [lease.key]

    asyncio.run(a_dead_workers_run())
    assert sum(counted.taken.values()) == taken_before + 1
    assert counted.balanced() and stream_slots_held(user_id=user.pk) == 0
