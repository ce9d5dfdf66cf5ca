"""/healthz: what load balancers and monitors probe, every few seconds, on every worker.

Workers serve it straight from the ASGI entry point (`healthz_asgi`), not through Django's
middleware: Django's sync-style middleware runs its hooks on a thread under ASGI (about fifteen
hops per request before campus_agent/middleware.py took seven of them back into the loop), and
on a busy worker each hop waits for the GIL and a turn of the event loop. A probe must measure
whether the worker and its database answer, not how long that queue is: through the middleware,
a turn reading a flood of tool calls made it 60-140 ms, here 15-40 ms with one thread hop, the
database's. It needs no
Host check either (a probe often sends an IP address, not a name in ALLOWED_HOSTS) nor session,
CSRF or security headers: it reads nothing and says only "ok" or "degraded".

The Django view (`healthz`, in the URLconf) answers the same under Django's test client and any
server that does not go through campus_agent.asgi.
"""
import json

from django.db import connection
from django.http import JsonResponse
from loguru import logger

from campus_agent.base.asyncdb import db_call
from campus_agent.base.request_id import HEADER, request_begun, request_ended, request_id_from_header

HEALTHY = (200, {"status": "ok", "db": "ok"})
DEGRADED = (503, {"status": "degraded", "db": "unavailable"})


def is_healthz_path(scope) -> bool:
    return scope["path"] in ("/healthz", f"{scope.get('root_path', '')}/healthz")  # the latter: behind a prefix


def _database_ping() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


async def health_status() -> tuple[int, dict]:
    """(status, body). The ping runs on the stream path's database threads, which keep their
    connection (a failed ping drops it, so the next one connects anew)."""
    try:
        await db_call(_database_ping)
    except Exception as exc:  # any driver error means "not healthy", never a traceback
        logger.warning("healthz: database unavailable: {}", type(exc).__name__)
        return DEGRADED
    return HEALTHY


async def healthz(request):
    """200 `{"status": "ok", "db": "ok"}`; 503 when the database does not answer."""
    status, body = await health_status()
    return JsonResponse(body, status=status)


async def healthz_asgi(scope, receive, send) -> None:
    """The same answer as `healthz`; its request id is read, logged and echoed as the middleware does."""
    headers = dict(scope.get("headers") or ())
    request_id = request_id_from_header(headers.get(b"x-request-id", b"").decode("latin-1"))
    method, path = scope.get("method", "GET"), scope["path"]
    started = request_begun(request_id, method, path)
    status, body = await health_status()
    payload = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
        (b"cache-control", b"no-store"), (HEADER.lower().encode(), request_id.encode()),
    ]})
    await send({"type": "http.response.body", "body": b"" if method == "HEAD" else payload})
    request_ended(method, path, status, started)
