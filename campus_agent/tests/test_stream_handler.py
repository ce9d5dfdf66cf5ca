"""The streaming endpoints run without a thread per request (campus_agent/stream_handler.py):
held streams do not each park a thread, and everything else still goes through Django's handler."""
import threading

import httpx
import pytest

from agents_app.testing.fake_llm import Reply
from campus_agent.stream_handler import is_stream_path
from chat_app.services.auth import auth_session_create
from chat_app.tests.sse import read_rest, read_until

pytestmark = pytest.mark.django_db(transaction=True)

STREAMS = 5


def test_the_stream_paths_and_only_they_take_the_lean_handler():
    assert is_stream_path("/api/v1/chat")
    assert is_stream_path("/api/v1/runs/8c1d2e3f-0000-4000-8000-000000000000/events")
    assert is_stream_path("/campus/api/v1/chat")  # behind a script prefix
    assert not is_stream_path("/api/v1/chats")
    assert not is_stream_path("/api/v1/runs/8c1d2e3f-0000-4000-8000-000000000000/stop")
    assert not is_stream_path("/api/v1/conversations")


def test_held_streams_park_no_thread_each(live_asgi, llm_settings, agent, user, settings):
    settings.CHAT_MAX_CONCURRENT_STREAMS = STREAMS
    for _ in range(STREAMS + 1):
        llm_settings.queue(Reply(text="慢慢地说。" * 8, chunk_size=5, chunk_delay=0.05))
    token = auth_session_create(user=user, via="password", roles=["student"]).access_token
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=live_asgi, timeout=20) as warm:  # the pools' own threads start here
        with warm.stream("POST", "/api/v1/chat", json={"message": "先热身"}, headers=headers) as response:
            read_rest(response)
    before = threading.active_count()
    clients = [httpx.Client(base_url=live_asgi, timeout=20) for _ in range(STREAMS)]
    try:
        opened = []
        for client in clients:
            stream = client.stream("POST", "/api/v1/chat", json={"message": "慢慢说"}, headers=headers)
            response = stream.__enter__()
            read_until(response, lambda f: f["type"] == "chunk")
            opened.append((stream, response))
        holding = threading.active_count()
        for stream, response in opened:
            read_rest(response)
            stream.__exit__(None, None, None)
    finally:
        for client in clients:
            client.close()
    # Django's handler started a thread per request that idled as long as its stream (+5 here).
    assert holding - before <= 1


def test_a_stream_answer_carries_the_security_headers_and_the_policy(live_asgi, llm_settings, agent, user):
    llm_settings.queue(Reply(text="好的。"))
    token = auth_session_create(user=user, via="password", roles=["student"]).access_token
    auth_headers = {"Authorization": f"Bearer {token}"}
    with httpx.stream("POST", f"{live_asgi}/api/v1/chat", json={"message": "你好"}, headers=auth_headers,
                      timeout=20) as response:
        read_rest(response)
    assert response.status_code == 200
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "same-origin"
    assert "default-src" in response.headers["content-security-policy"]
    assert response.headers["x-request-id"]
