"""Per-user limits on the stream: concurrent streams and messages per minute → 429 JSON."""
import asyncio
import threading
import time
import uuid

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.core.cache import cache
from django.test import RequestFactory

from chat_app.gateways.api.stream import _admit
from chat_app.models import Message
from chat_app.runs import lease as limits
from chat_app.runs.lease import RunLease, stream_slots_held
from chat_app.runs.state import local_runs
from testkit.model.fake_llm import Reply
from testkit.web.sse import chat

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.embedded]


def _hold_stream(base, headers, opened: threading.Event, results: list):
    with httpx.Client(base_url=base, timeout=15) as client:
        with client.stream("POST", "/api/v1/chat", json={"message": "慢慢说"}, headers=headers) as response:
            for _ in response.iter_text():
                opened.set()
            results.append(response.status_code)


def test_concurrent_streams_over_the_limit_get_429(
    live_asgi, llm_settings, agent, auth_headers, settings, other_user, token_for
):
    settings.CHAT_MAX_CONCURRENT_STREAMS = 1
    llm_settings.queue(Reply(text="一二三四五六七八", chunk_size=1, chunk_delay=0.15))
    opened, results = threading.Event(), []
    holder = threading.Thread(target=_hold_stream, args=(live_asgi, auth_headers, opened, results))
    holder.start()
    assert opened.wait(5)

    second = chat(live_asgi, {"message": "插队"}, headers=auth_headers)
    assert second.status == 429
    assert second.body_json == {"code": 42901, "message": "同时进行的对话太多，请等当前回答结束后再试。"}

    # Another user is not limited by this user's stream.
    llm_settings.reply_text("你好")
    other = chat(live_asgi, {"message": "你好"}, headers={"Authorization": f"Bearer {token_for(other_user)}"})
    assert other.status == 200 and other.types[-1] == "done"

    holder.join(10)
    assert results == [200]
    llm_settings.reply_text("轮到你了")
    after = chat(live_asgi, {"message": "现在呢"}, headers=auth_headers)
    assert after.status == 200 and after.text == "轮到你了"


def test_message_rate_over_the_limit_gets_429(live_asgi, llm_settings, agent, auth_headers, settings):
    settings.CHAT_RATE_PER_MINUTE = 2
    llm_settings.responder = lambda request: "好"
    assert chat(live_asgi, {"message": "一"}, headers=auth_headers).status == 200
    assert chat(live_asgi, {"message": "二"}, headers=auth_headers).status == 200
    third = chat(live_asgi, {"message": "三"}, headers=auth_headers)
    assert third.status == 429
    assert third.body_json == {"code": 42902, "message": "发送太频繁，请稍后再试。"}
    assert third.headers["Retry-After"] == "60"
    assert len(llm_settings.requests) == 2


async def test_a_slot_held_by_another_worker_counts(settings):
    """With a shared cache, a slot leased by another process refuses this worker's stream too."""
    settings.CHAT_MAX_CONCURRENT_STREAMS = 2
    cache.add("chat:streams:7:0", "other-worker", 60)  # what the other worker's lease wrote
    async with RunLease(user_id=7, new_message=False) as mine:
        assert mine.held and mine.key == "chat:streams:7:1"
        async with RunLease(user_id=7, new_message=False) as refused:
            assert not refused.held  # 1 here + 1 elsewhere = the limit
        assert stream_slots_held(user_id=7) == 2  # the cache is the count: this worker's and the other's
    await mine.__aexit__(None, None, None)  # released once: leaving again gives nothing back
    assert stream_slots_held(user_id=7) == 1  # the other worker's
    assert cache.get("chat:streams:7:1") is None and cache.get("chat:streams:7:0") == "other-worker"


class _SlowMeta(dict):
    """request.META whose Authorization read, on a database thread, waits for `release`: it holds
    the admission inside its database thread while the test cancels the view, as a client leaving
    then would. (The view's event loop reads the header first, for chat_app.accounts.session_cache; that read
    does not wait.)"""

    def __init__(self, *args, entered: threading.Event, release: threading.Event, **kwargs):
        super().__init__(*args, **kwargs)
        self.entered, self.release = entered, release

    def get(self, key, default=None):
        if key == "HTTP_AUTHORIZATION" and threading.current_thread().name.startswith("chat-db"):
            self.entered.set()
            assert self.release.wait(10)
        return super().get(key, default)


async def test_client_leaving_during_admission_still_runs_the_turn_then_gives_the_slot_back(
    user, agent, user_token, llm_settings
):
    """The turn belongs to the server once admitted (docs/design.md#runs): a client that left during
    admission finds its answer stored, and the slot is held only while the run runs."""
    llm_settings.reply_text("在的。")
    request = RequestFactory().post("/api/v1/chat", data={"message": "在吗"}, content_type="application/json")
    entered, release = threading.Event(), threading.Event()
    request.META = _SlowMeta(request.META, HTTP_AUTHORIZATION=f"Bearer {user_token}", entered=entered, release=release)
    request.request_id = uuid.uuid4().hex[:16]  # names this test's run among those kept in memory

    view = asyncio.ensure_future(_admit(request))
    assert await asyncio.to_thread(entered.wait, 5)
    view.cancel()  # what Django does to the view when the client disconnects
    with pytest.raises(asyncio.CancelledError):
        await view
    release.set()

    def stored() -> list[tuple[str, str, bool]]:
        rows = Message.objects.filter(conversation__user=user).order_by("created_at", "seq")
        return [(m.role, m.content, bool(m.meta.get("interrupted"))) for m in rows]

    # Admission ends on its database thread, then starts the run on this loop: wait for that
    # run's task to end (in memory; reading the database while the run writes it would race on
    # the test's shared in-memory SQLite).
    def this_run():
        return next((r for r in list(local_runs.values()) if r.run.request_id == request.request_id), None)

    async with asyncio.timeout(10):
        while this_run() is None:
            await asyncio.sleep(0.01)
    started = this_run()
    await asyncio.wait({started.task})
    assert stream_slots_held(user_id=user.pk) == 0
    assert await sync_to_async(stored)() == [("user", "在吗", False), ("assistant", "在的。", False)]


def test_the_rate_window_does_not_reset_on_a_clock_boundary(settings, monkeypatch):
    """Two messages either side of a window-length clock boundary still count together; the
    window ends one window length after the first message."""
    settings.CHAT_RATE_PER_MINUTE = 1
    monkeypatch.setattr(limits, "RATE_WINDOW_SEC", 1)  # a one-second "minute" keeps the test short
    while time.time() % 1 < 0.8:  # just before a boundary of time() // window
        time.sleep(0.02)
    opened = time.monotonic()
    assert limits.message_rate_count(user_id=11) == 1
    time.sleep(0.3)  # the clock's bucket has changed, the window has not ended
    assert limits.message_rate_count(user_id=11) == 2
    assert limits.message_rate_count(user_id=12) == 1  # per user
    time.sleep(max(0.0, 1.05 - (time.monotonic() - opened)))
    assert limits.message_rate_count(user_id=11) == 1  # the window ended: a fresh one
