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

Once the view has answered, nothing of Django's request stays with a held stream (issue #46,
docs/benchmarks.md). Django's handler keeps, for as long as the response lasts, the request, its
body file and two tasks: one that gets the response and sends it, one that listens for the
client's disconnect. Here the request is closed and let go when the view returns, and the
response is sent by the handler's own task, which the listener cancels when the client goes
away, as Django cancels its task. The response, its headers and its chunks are Django's
(`send_response`), and it is closed as Django closes it (its closers, `request_finished`).
"""
import asyncio
import re
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.conf import settings
from django.core import signals
from django.core.exceptions import ImproperlyConfigured, MiddlewareNotUsed, RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.core.handlers.exception import convert_exception_to_response
from django.urls import set_script_prefix
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


# Left out on the stream paths: django-simple-history's middleware lends the request to the
# catalog's history rows (who changed a prompt), and no stream changes the catalog. The request
# it puts in context-local storage was copied into the context of every task the view starts —
# the run's among them — and so lived as long as the run (issue #46).
NOT_ON_STREAM_PATHS = frozenset({"simple_history.middleware.HistoryRequestMiddleware"})


def stream_middleware() -> list[str]:
    """settings.MIDDLEWARE with each class of INLINE_TWINS read as its twin (Django's CSRF class
    kept when the token is read from the session: that is I/O, which Django's hops serve), and
    without NOT_ON_STREAM_PATHS."""
    twins = dict(INLINE_TWINS)
    if settings.CSRF_USE_SESSIONS:
        del twins["django.middleware.csrf.CsrfViewMiddleware"]
    return [twins.get(path, path) for path in settings.MIDDLEWARE if path not in NOT_ON_STREAM_PATHS]


def _request_closed_now(request, response) -> None:
    """Django has the response close the request when it ends (BaseHandler.get_response_async
    appends `request.close` to the response's `_resource_closers`), and that reference kept the
    whole request as long as a stream. The view has read the body by now: the request is closed
    here instead (its uploaded files, its body), and the response no longer refers to it
    (campus_agent/tests/test_stream_handler.py notices if Django's handler changes)."""
    try:
        response._resource_closers.remove(request.close)
    except ValueError:
        return
    request.close()


def _left_cleanly(leaving: asyncio.Task) -> None:
    """The listener's outcome read (so asyncio does not log it as never retrieved): a disconnect
    (RequestAborted) or cancelled; anything else was a message no client may send after its body,
    raised as Django raises it."""
    if leaving.done() and not leaving.cancelled():
        error = leaving.exception()
        if error is not None and not isinstance(error, RequestAborted):
            raise error


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

    async def handle(self, scope, receive, send):
        """Django's `ASGIHandler.handle` up to the view's response, then the response sent with
        no request held (the module's docstring)."""
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        set_script_prefix(get_script_prefix(scope))
        await signals.request_started.asend(sender=self.__class__, scope=scope)
        request, error_response = self.create_request(scope, body_file)
        if request is None:
            body_file.close()
            await self.send_response(error_response, send)
            await sync_to_async(error_response.close)()
            return
        leaving = asyncio.create_task(self.listen_for_disconnect(receive))  # ends with RequestAborted
        try:
            response = await self._response_unless_gone(request, leaving)
        finally:
            body_file.close()
        if response is None:  # the client left before the view answered: the view was cancelled
            await signals.request_finished.asend(sender=self.__class__)
            _left_cleanly(leaving)
            return
        _request_closed_now(request, response)
        del request, body_file  # nothing of the request is held while the response streams
        try:
            await self._send_unless_gone(response, send, leaving)
        finally:
            leaving.cancel()
            await sync_to_async(response.close)()
            _left_cleanly(leaving)

    async def _response_unless_gone(self, request, leaving: asyncio.Task):
        """The view's response, or None when the client left first (the view is cancelled then,
        as Django cancels it)."""
        answering = asyncio.create_task(self.run_get_response(request))
        await asyncio.wait((leaving, answering), return_when=asyncio.FIRST_COMPLETED)
        if answering.done():
            return answering.result()
        answering.cancel()
        try:
            await answering
        except asyncio.CancelledError:
            pass
        return None

    async def _send_unless_gone(self, response, send, leaving: asyncio.Task) -> None:
        """`send_response` in this task, cancelled when the client goes away (the frames'
        generator then ends as under Django: cancelled at its await, then closed)."""
        sending = asyncio.current_task()
        gone = sent = False

        def client_left(_):
            nonlocal gone
            if not sent:  # a callback already scheduled when the response ended does nothing
                gone = True
                sending.cancel()

        leaving.add_done_callback(client_left)
        try:
            await self.send_response(response, send)
        except asyncio.CancelledError:
            if not gone:
                raise  # the server's (shutting down), not the client's
            sending.uncancel()
        finally:
            sent = True
            leaving.remove_done_callback(client_left)
