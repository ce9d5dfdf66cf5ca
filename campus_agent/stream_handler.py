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
eight hops to that thread and back per request (docs/benchmarks.md). The handler builds that
chain itself (`load_middleware`), in the event loop's mode only.
"""
import re
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import ThreadSensitiveContext
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured, MiddlewareNotUsed
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.exception import convert_exception_to_response
from django.utils.module_loading import import_string

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


def stream_middleware() -> list[str]:
    """settings.MIDDLEWARE with each class of INLINE_TWINS read as its twin (Django's CSRF class
    kept when the token is read from the session: that is I/O, which Django's hops serve)."""
    twins = dict(INLINE_TWINS)
    if settings.CSRF_USE_SESSIONS:
        del twins["django.middleware.csrf.CsrfViewMiddleware"]
    return [twins.get(path, path) for path in settings.MIDDLEWARE]


class StreamHandler(ASGIHandler):
    def load_middleware(self, is_async=False):
        """Django's chain building (BaseHandler.load_middleware) over `stream_middleware()`, for a
        chain that is async all the way: each middleware must be async-capable (settings.MIDDLEWARE
        says every one is), so no hook is adapted to a thread; MiddlewareNotUsed skips one, as in
        Django. Written here rather than by swapping Django's module-level `import_string` while
        Django builds it: a subclass owns its method, and a global swapped for a moment would
        break silently on a Django upgrade (campus_agent/tests/test_stream_handler.py compares
        the two chains)."""
        self._view_middleware = []
        self._template_response_middleware = []
        self._exception_middleware = []
        handler = convert_exception_to_response(self._get_response_async)
        for path in reversed(stream_middleware()):
            middleware = import_string(path)
            if not getattr(middleware, "async_capable", False):
                raise ImproperlyConfigured(f"the stream paths' middleware must be async-capable: {path}")
            try:
                instance = middleware(handler)
            except MiddlewareNotUsed:
                continue
            if instance is None:
                raise ImproperlyConfigured(f"Middleware factory {path} returned None.")
            if hasattr(instance, "process_view"):
                self._view_middleware.insert(0, self.adapt_method_mode(True, instance.process_view))
            if hasattr(instance, "process_template_response"):
                self._template_response_middleware.append(
                    self.adapt_method_mode(True, instance.process_template_response))
            if hasattr(instance, "process_exception"):  # Django runs these sync, whatever the chain
                self._exception_middleware.append(self.adapt_method_mode(False, instance.process_exception))
            handler = convert_exception_to_response(instance)
        self._middleware_chain = handler

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        # A fresh context object per request (one may be entered once), all on the same thread.
        async with ThreadSensitiveContext(executor=_signals_executor):
            await self.handle(scope, receive, send)
