"""The streaming endpoints run without a thread per request (campus_agent/stream_handler.py):
held streams do not each park a thread, and everything else still goes through Django's handler."""
import asyncio
import gc
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from asgiref.sync import SyncToAsync
from django.core.handlers.asgi import ASGIHandler
from django.http import HttpRequest
from django.middleware.csrf import CsrfViewMiddleware

from campus_agent import stream_handler
from campus_agent.base.errors import TOKEN_INVALID
from campus_agent.middleware import InlineCsrfViewMiddleware
from campus_agent.stream_handler import StreamHandler, is_stream_path
from chat_app.accounts.sessions import auth_session_create
from testkit.model.fake_llm import Reply
from testkit.web.sse import read_rest, read_until

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


def _requests_alive(request_id: str) -> int:
    """The requests this process still holds that came with `request_id` (other tests' may linger)."""
    gc.collect()
    # type(), not isinstance(): a lazy object (the CSP nonce) would be evaluated by isinstance
    return sum(1 for held in gc.get_objects()
               if issubclass(type(held), HttpRequest) and held.META.get("HTTP_X_REQUEST_ID") == request_id)


def test_a_held_stream_keeps_nothing_of_djangos_request(live_asgi, llm_settings, agent, user):
    """Once the view has answered, the stream holds no request: not Django's (nor the intake's
    reading of the head). Under Django's own handler each held stream kept two (issue #46)."""
    llm_settings.queue(Reply(text="慢慢地说。" * 8, chunk_size=5, chunk_delay=0.1))
    token = auth_session_create(user=user, via="password", roles=["student"]).access_token
    request_id = uuid.uuid4().hex
    headers = {"Authorization": f"Bearer {token}", "X-Request-ID": request_id}
    with httpx.Client(base_url=live_asgi, timeout=20) as client, client.stream(
            "POST", "/api/v1/chat", json={"message": "慢慢说"}, headers=headers) as response:
        read_until(response, lambda f: f["type"] == "chunk")
        held = _requests_alive(request_id)
        rest = read_rest(response)
    assert response.headers["x-request-id"] == request_id  # the id is the one counted
    assert held == 0
    assert '"type":"done"' in rest  # and the stream went on to its end


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


class _HopsCounted(ThreadPoolExecutor):
    """The stream paths' shared thread, counting what is handed to it."""

    def __init__(self):
        super().__init__(max_workers=1)
        self.hops = 0

    def submit(self, fn, /, *args, **kwargs):
        self.hops += 1
        return super().submit(fn, *args, **kwargs)


class _DjangosChain(StreamHandler):
    load_middleware = ASGIHandler.load_middleware  # settings.MIDDLEWARE as it is, no twins


def _hops_of_one_request(handler, monkeypatch) -> int:
    """A Bearer POST to the chat stream that Django's whole chain handles (401: the token is not a
    JWT, found without the database), in this process; how often it crossed to the shared thread."""
    executor = _HopsCounted()
    monkeypatch.setattr(stream_handler, "_signals_executor", executor)

    async def post():
        transport = httpx.ASGITransport(app=handler)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            return await client.post("/api/v1/chat", json={"message": "你好"},
                                     headers={"Authorization": "Bearer not-a-jwt"})

    try:
        response = asyncio.run(post())
    finally:
        executor.shutdown()
    assert response.status_code == 401
    assert response.headers["x-frame-options"] == "DENY"  # each of the four still did its work
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.json()["code"] == TOKEN_INVALID
    return executor.hops


def test_the_stream_paths_run_djangos_middleware_hooks_in_the_event_loop(monkeypatch):
    inline = _hops_of_one_request(StreamHandler(), monkeypatch)
    hopping = _hops_of_one_request(_DjangosChain(), monkeypatch)
    # Security 2 (request, response), sessions 2, CSRF 3 (request, view, response), X-Frame-Options 1.
    assert hopping - inline == 8
    assert inline <= 3  # Django's request_started / request_finished receivers, the response's close


def test_a_csrf_token_kept_in_the_session_keeps_djangos_csrf_hooks(settings):
    settings.CSRF_USE_SESSIONS = True  # reading it is a session read: I/O, so not in the event loop
    handler = StreamHandler()
    csrf = [hook.__self__ for hook in map(_unwrapped, handler._view_middleware)
            if isinstance(getattr(hook, "__self__", None), CsrfViewMiddleware)]
    assert [type(mw) for mw in csrf] == [CsrfViewMiddleware]
    settings.CSRF_USE_SESSIONS = False
    csrf = [hook.__self__ for hook in map(_unwrapped, StreamHandler()._view_middleware)
            if isinstance(getattr(hook, "__self__", None), CsrfViewMiddleware)]
    assert [type(mw) for mw in csrf] == [InlineCsrfViewMiddleware]


def _unwrapped(hook):
    return getattr(hook, "func", hook)  # Django's adapted sync hook is a SyncToAsync around it


def _owners(hooks) -> list[type]:
    return [type(getattr(_unwrapped(hook), "__self__", None)) for hook in hooks]


def test_the_handler_builds_the_chain_djangos_builder_would_build_from_the_same_list(settings):
    """StreamHandler.load_middleware is Django's chain building written for an async-only chain:
    over the same list, Django's own builder makes the same hooks, in the same order, each in the
    event loop (Django runs exception hooks sync in both)."""
    ours = StreamHandler()
    settings.MIDDLEWARE = stream_handler.stream_middleware()
    djangos = _DjangosChain()
    assert _owners(ours._view_middleware) == _owners(djangos._view_middleware)
    assert _owners(ours._template_response_middleware) == _owners(djangos._template_response_middleware)
    assert _owners(ours._exception_middleware) == _owners(djangos._exception_middleware)
    assert InlineCsrfViewMiddleware in _owners(ours._view_middleware)
    assert not any(isinstance(hook, SyncToAsync) for hook in ours._view_middleware)
