"""ASGI entry point; runs under daphne (`manage.py runserver`, `daphne`) and uvicorn alike."""
import gc
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "campus_agent.settings")
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter  # noqa: E402  (needs Django set up first)
from django.conf import settings  # noqa: E402
from django.urls import get_resolver  # noqa: E402

from campus_agent.health import healthz_asgi, is_healthz_path  # noqa: E402
from campus_agent.intake import Intake  # noqa: E402
from campus_agent.stream_handler import StreamHandler, is_stream_path  # noqa: E402
from chat_app.gateways.a2a_server import a2a_app, is_a2a_path  # noqa: E402
from chat_app.gateways.mcp_server import is_mcp_path, mcp_app  # noqa: E402
from chat_app.runs.supervisor import supervisor_ensure  # noqa: E402
from demo_app.subagents.library_a2a import LIBRARY_PATH, library_app  # noqa: E402

stream_app = StreamHandler()  # the streaming endpoints: no thread per request (stream_handler.py)

# Young objects are collected after this many allocations (CPython's default is 700): a turn
# makes thousands, and each collection walks the young generation (docs/benchmarks.md).
GC_YOUNG_THRESHOLD = 20_000


def _gc_freeze() -> None:
    """Keeps the garbage collector off the objects every worker holds for its whole life.

    Most of a worker's objects are the modules, Django's and the SDKs' (≈ 240,000): a full
    collection walked them all, a pause of 50–300 ms on the 2-core machine for every stream of
    the worker (the p99 of the first chunk, docs/benchmarks.md). Frozen after start-up, they
    are never walked again; what the requests make is collected as before.
    """
    _ = get_resolver().url_patterns  # imports the URLconf (and every view) now, not on the first request
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])


_gc_freeze()


async def served_app(scope, receive, send):
    if settings.DEMO_ENABLED and scope["path"].startswith(LIBRARY_PATH + "/"):
        # The demo A2A agent is an a2a-sdk (Starlette) app, served beside Django as the demo
        # seed-contract sub-agents are under the same /demo/subagents/ prefix.
        await library_app()(scope, receive, send)
        return
    if is_a2a_path(scope["path"]):
        # The campus agent as an A2A agent (card + JSON-RPC, chat_app/gateways/a2a_server.py): an a2a-sdk app.
        await a2a_app()(scope, receive, send)
        return
    if is_mcp_path(scope["path"]):
        # The MCP server (docs/design.md#other-clients) is the official SDK's streamable-HTTP app, not a Django view.
        await mcp_app(scope, receive, send)
        return
    app = stream_app if is_stream_path(scope["path"]) else django_asgi_app
    await app(scope, receive, send)


intake = Intake(served_app)


async def http_app(scope, receive, send):
    # The composition root starts each worker's run supervisor with its first request, so a
    # restarted worker finishes the runs its predecessor left (docs/design.md#runs). A dict lookup after that.
    supervisor_ensure()
    if is_healthz_path(scope):
        # Probes skip Django's middleware: one thread hop instead of a dozen (campus_agent/health.py),
        # and the Host check (a probe often sends an address).
        await healthz_asgi(scope, receive, send)
        return
    # The Host, the caller and the body's cap, decided before any body is read (campus_agent/intake.py).
    await intake(scope, receive, send)


application = ProtocolTypeRouter({"http": http_app})
