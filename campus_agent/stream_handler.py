"""Django's ASGI handler for the streaming endpoints, without a thread per request (issue #11).

Django's `ASGIHandler` wraps every request in a `ThreadSensitiveContext()`: the request's first
thread-sensitive sync call — Django's own `request_started` receivers (`close_old_connections`,
`reset_queries`), sent before any view runs — starts a thread for that request alone, which
then idles for as long as the response lasts, and a second thread is started to join it at the
end. For a stream that is a parked thread per held stream and two thread starts per turn.

The streaming views are async end to end and do their database work on `campus_agent.asyncdb`'s
threads; the only sync code of their request is those signal receivers, which touch nothing of
the request. Here they run on one shared thread instead, one at a time (a few microseconds
each). Everything else is Django's handler: the same middleware, signals, errors and response.
"""
import re
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import ThreadSensitiveContext
from django.core.handlers.asgi import ASGIHandler

# POST /api/v1/chat, GET /api/v1/runs/<id>/events and the OpenAI-compatible POST
# /v1/chat/completions (under any script prefix).
STREAM_PATH = re.compile(r"(?:^|/)(?:api/v1/(?:chat|runs/[^/]+/events)|v1/chat/completions)$")

_signals_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="stream-signals")


def is_stream_path(path: str) -> bool:
    return STREAM_PATH.search(path) is not None


class StreamHandler(ASGIHandler):
    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        # A fresh context object per request (one may be entered once), all on the same thread.
        async with ThreadSensitiveContext(executor=_signals_executor):
            await self.handle(scope, receive, send)
