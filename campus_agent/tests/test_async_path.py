"""Nothing synchronous in front of async views: they run in the server's event loop."""
import httpx
import pytest
from django.core.handlers.asgi import ASGIHandler
from django.test import override_settings

from testkit.servers import ThreadedAsgiServer

PROBE_URLS = "testkit.web.probe_urls"


@pytest.mark.django_db(transaction=True)
def test_async_view_runs_in_the_event_loop_thread_without_a_sync_hop(settings, live_asgi):
    settings.ROOT_URLCONF = PROBE_URLS

    response = httpx.get(f"{live_asgi}/probe", headers={"X-Request-Id": "aaaabbbbccccdddd"})

    assert response.status_code == 200
    assert response.json() == {
        "thread": "asgi-test-server",  # the uvicorn thread running the loop, not a worker
        "loop_running": True,
        "via_async_to_sync": False,
        "request_id": "aaaabbbbccccdddd",  # the middleware's ContextVar reaches the view
    }
    assert response.headers["X-Request-Id"] == "aaaabbbbccccdddd"


@pytest.mark.django_db(transaction=True)
def test_the_probe_does_see_a_sync_middleware(settings):
    # Control: with one sync-only middleware in the chain, the same probe reports the hop,
    # so the assertion above can fail.
    settings.ROOT_URLCONF = PROBE_URLS
    with override_settings(MIDDLEWARE=[f"{PROBE_URLS}.SyncOnlyMiddleware", *settings.MIDDLEWARE]):
        handler = ASGIHandler()
    with ThreadedAsgiServer(handler) as server:
        response = httpx.get(f"{server.url}/probe")

    assert response.status_code == 200
    assert response.json()["via_async_to_sync"] is True
