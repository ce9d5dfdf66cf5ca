"""The project's middleware: the request id, and Django's own run in the event loop instead of on
a thread per hook.

Under ASGI, a `MiddlewareMixin` middleware (all of Django's, and django-csp's) runs each of its
hooks through `sync_to_async(thread_sensitive=True)`: for the stack in settings.MIDDLEWARE a
dozen hops to a thread and back on every request, each of which waits for the GIL and a turn of
the event loop, and on the stream paths (campus_agent/stream_handler.py) all of them share one
thread, so under a burst every stream's hooks queue there one after another.

The hooks of the classes here do no I/O: they set headers, resolve a URL, make lazy objects
(`request.user` is fetched when a view asks for it: `request.auser()` in async views), keep the
messages in the session object. They run inline. Should one ever touch the database from the
event loop, Django raises SynchronousOnlyOperation: a loud error, not a silent stall.

Each is a subclass of Django's, so the admin's checks (E408, E409: by subclass) still find them,
and the sync path (Django's test client, WSGI) is Django's own. SecurityMiddleware,
SessionMiddleware (its `process_response` saves the session), CsrfViewMiddleware and
XFrameOptionsMiddleware stay Django's in settings.MIDDLEWARE: `check --deploy` looks for them by
their dotted names, and without them skips the checks that depend on them. Their inline twins
(`Inline…` below) serve the stream paths only, whose handler builds its chain with them
(campus_agent/stream_handler.py).
"""
from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from csp.middleware import CSPMiddleware as _CSPMiddleware
from django.conf import settings
from django.contrib.auth.middleware import AuthenticationMiddleware as _AuthenticationMiddleware
from django.contrib.messages.middleware import MessageMiddleware as _MessageMiddleware
from django.contrib.sessions.middleware import SessionMiddleware as _SessionMiddleware
from django.middleware.clickjacking import XFrameOptionsMiddleware as _XFrameOptionsMiddleware
from django.middleware.common import CommonMiddleware as _CommonMiddleware
from django.middleware.csrf import CsrfViewMiddleware as _CsrfViewMiddleware
from django.middleware.locale import LocaleMiddleware as _LocaleMiddleware
from django.middleware.security import SecurityMiddleware as _SecurityMiddleware
from django.utils import translation
from django.utils.deprecation import MiddlewareMixin

from campus_agent.base.request_id import (
    HEADER,
    META_KEY,
    is_turn_request,
    request_begun,
    request_ended,
    request_id_from_header,
)
from campus_agent.refusals import api_family, refusal_response, status_error


class InlineHooks:
    """`MiddlewareMixin.__acall__`, with the hooks called in the event loop (the classes below
    have only process_request and process_response)."""

    async def __acall__(self, request):
        response = None
        if hasattr(self, "process_request"):
            response = self.process_request(request)
        response = response or await self.get_response(request)
        if hasattr(self, "process_response"):
            response = self.process_response(request, response)
        return response


class CSPMiddleware(InlineHooks, _CSPMiddleware):
    pass


class CommonMiddleware(InlineHooks, _CommonMiddleware):
    pass


class AuthenticationMiddleware(InlineHooks, _AuthenticationMiddleware):
    pass


class MessageMiddleware(InlineHooks, _MessageMiddleware):
    pass


class LocaleMiddleware(InlineHooks, _LocaleMiddleware):
    """The request's language (cookie, else Accept-Language; no language prefix in URLs), except
    under /admin/, which stays in LANGUAGE_CODE: staff work in Chinese whatever their browser says."""

    def process_request(self, request):
        if request.path.startswith("/admin/"):
            translation.activate(settings.LANGUAGE_CODE)
            request.LANGUAGE_CODE = translation.get_language()
            return None
        return super().process_request(request)


# The twins of the four that settings.MIDDLEWARE keeps Django's, for the stream paths' handler
# (campus_agent/stream_handler.py): async only, which that handler is.


class InlineSecurityMiddleware(InlineHooks, _SecurityMiddleware):
    """Headers, and the redirect to HTTPS: no I/O."""


class InlineXFrameOptionsMiddleware(InlineHooks, _XFrameOptionsMiddleware):
    """One header: no I/O."""


class InlineCsrfViewMiddleware(InlineHooks, _CsrfViewMiddleware):
    """With the token in a cookie (the stream handler keeps Django's class when CSRF_USE_SESSIONS
    puts it in the session) and the body read into memory before the view is resolved, no hook
    does I/O. Django adapts a sync `process_view` to a thread hop; an async one it calls as it is."""

    async def process_view(self, request, callback, callback_args, callback_kwargs):
        return super().process_view(request, callback, callback_args, callback_kwargs)


class InlineSessionMiddleware(_SessionMiddleware):
    """The session object is lazy (read when the view asks, on a database thread), so making it
    is no I/O. After the view, a session that was never read (a Bearer request) has nothing to
    save, and Django's `process_response` runs inline; one that was read may have changed (the
    page's campus token refreshed) and is saved as Django does, on a thread."""

    async def __acall__(self, request):
        self.process_request(request)
        response = await self.get_response(request)
        if request.session.accessed or settings.SESSION_SAVE_EVERY_REQUEST:
            return await sync_to_async(self.process_response, thread_sensitive=True)(request, response)
        return self.process_response(request, response)


class ApiErrorShapeMiddleware(InlineHooks, MiddlewareMixin):
    """Under the API prefixes an error is JSON whoever answered it (docs/security.md#hosts-and-error-shapes):
    a view's own HTML error (Django's 405 of `require_http_methods`, a DRF view that renders HTML,
    such as the API docs) becomes the API's error for its status (campus_agent.refusals). The
    headers that say what to do next are kept."""

    KEPT_HEADERS = ("Allow", "Retry-After", "WWW-Authenticate")

    def process_response(self, request, response):
        if response.status_code < 400 or response.streaming or "json" in response.get("Content-Type", ""):
            return response
        if api_family(request.path_info) is None:
            return response
        shaped = refusal_response(request, status_error(response.status_code))
        for name in self.KEPT_HEADERS:
            if name in response:
                shaped[name] = response[name]
        return shaped


class RequestIdMiddleware:
    """Reads or makes the request id, logs the request's start and end, echoes the header.

    Async-capable so that async views (the chat stream) run without a thread per request.
    """

    sync_capable = True
    async_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def _start(self, request) -> float:
        request.request_id = request_id_from_header(request.META.get(META_KEY))
        level = "DEBUG" if is_turn_request(request.method, request.path) else "INFO"
        return request_begun(request.request_id, request.method, request.path, level=level)

    def _finish(self, request, response, started: float):
        response[HEADER] = request.request_id
        level = "DEBUG" if response.status_code < 400 and is_turn_request(request.method, request.path) else "INFO"
        request_ended(request.method, request.path, response.status_code, started, level=level)
        return response

    def __call__(self, request):
        if iscoroutinefunction(self):
            return self.__acall__(request)
        started = self._start(request)
        return self._finish(request, self.get_response(request), started)

    async def __acall__(self, request):
        started = self._start(request)
        return self._finish(request, await self.get_response(request), started)
