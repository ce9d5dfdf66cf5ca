"""Django's ASGI handler for the streaming endpoints, without a thread per request (issue #11).

Django's `ASGIHandler` wraps every request in a `ThreadSensitiveContext()`: the request's first
thread-sensitive sync call — Django's own `request_started` receivers (`close_old_connections`,
`reset_queries`), sent before any view runs — starts a thread for that request alone, which
then idles for as long as the response lasts, and a second thread is started to join it at the
end. For a stream that is a parked thread per held stream and two thread starts per turn.

The streaming views are async end to end and do their database work on `campus_agent.base.asyncdb`'s
threads; the only sync code of their request is those signal receivers, which touch nothing of
the request. Here they run on one shared thread instead, one at a time (a few microseconds
each). Everything else is Django's handler: the same middleware, signals, errors and response.

The middleware is settings.MIDDLEWARE with the four classes it keeps Django's (security,
sessions, CSRF, X-Frame-Options: `check --deploy` looks for them by name) replaced by their
inline twins in campus_agent.middleware: the same hooks, called in the event loop instead of
eight hops to that thread and back per request (docs/benchmarks.md, "The stream paths'
middleware in the event loop").
"""
import re
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import ThreadSensitiveContext
from django.conf import settings
from django.core.handlers import base
from django.core.handlers.asgi import ASGIHandler

# Django's class → its twin that runs the same hooks in the event loop (campus_agent.middleware).
INLINE_TWINS = {
    "django.middleware.security.SecurityMiddleware": "campus_agent.middleware.InlineSecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware": "campus_agent.middleware.InlineSessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware": "campus_agent.middleware.InlineCsrfViewMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware": "campus_agent.middleware.InlineXFrameOptionsMiddleware",
}

# POST /api/v1/chat, GET /api/v1/runs/<id>/events and the OpenAI-compatible POST
# /v1/chat/completions (under any script prefix).
STREAM_PATH = re.compile(r"(?:^|/)(?:api/v1/(?:chat|runs/[^/]+/events)|v1/chat/completions)$")

_signals_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="stream-signals")


def is_stream_path(path: str) -> bool:
    return STREAM_PATH.search(path) is not None


class StreamHandler(ASGIHandler):
    def load_middleware(self, is_async=False):
        """Django's own chain building, over settings.MIDDLEWARE with each class of INLINE_TWINS
        read as its twin: the module's `import_string` is swapped for the call (once, when the
        handler is made), so the order, the adaptation and MiddlewareNotUsed stay Django's."""
        twins = dict(INLINE_TWINS)
        if settings.CSRF_USE_SESSIONS:  # the CSRF token is then read from the session: I/O, Django's hops
            del twins["django.middleware.csrf.CsrfViewMiddleware"]
        django_import = base.import_string
        base.import_string = lambda path: django_import(twins.get(path, path))
        try:
            super().load_middleware(is_async)
        finally:
            base.import_string = django_import

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        # A fresh context object per request (one may be entered once), all on the same thread.
        async with ThreadSensitiveContext(executor=_signals_executor):
            await self.handle(scope, receive, send)
