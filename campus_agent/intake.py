"""What a worker decides from a request's head, before any of its body is read
(docs/security.md#request-bodies-refused-before-they-are-read, #hosts-and-error-shapes).

Django's ASGI handler reads a request's whole body before any middleware or view runs (into a
temporary file past FILE_UPLOAD_MAX_MEMORY_SIZE), so a cap or a login checked in a view comes
after the body is on disk: an anonymous 300 MB POST was written out in full and then answered
401. This layer stands in front of everything the worker serves (Django, the MCP and A2A
servers, the demo) but /healthz, and in this order:

1. the Host must be one of ALLOWED_HOSTS (Django's own rule, `HttpRequest.get_host`): 400, for
   the A2A card and the MCP server as for Django's paths;
2. where a body comes on a path that needs a caller (`BodyRule.caller_first`: the REST API and
   /v1), the caller must be known from the head (a Bearer JWT or API key, or the page's session
   cookie): 401, the body unread;
3. a Content-Length over the path's cap: 413, the body unread;
4. a body without Content-Length (chunked) is read here up to the cap and no further: past it,
   413; within it, the app reads it as it would have from the client.

Refusals are in the shape of the API asked (campus_agent.refusals). The MCP and A2A servers check
their Bearer themselves, before they read a body; their caps are here.

Only a server that hands the body over as it arrives can be spared it: uvicorn does (the
production server, docs/operations.md); daphne (`runserver`) reads the whole body before it calls
the application, so there nginx's per-location `client_max_body_size` is the cap.
"""

import io
import re
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.core.handlers.asgi import ASGIRequest
from django.utils import translation
from django.utils.translation import gettext_lazy as _
from loguru import logger

from campus_agent.base import errors
from campus_agent.base.json_body import too_large
from campus_agent.base.request_id import (
    HEADER,
    is_turn_request,
    request_begun,
    request_ended,
    request_id_from_header,
)
from campus_agent.refusals import MSG_HOST_NOT_ALLOWED, api_family, refusal_response
from chat_app.accounts.authentication import CALLER_SCOPE_KEY, acaller_known
from chat_app.conversations.uploads import upload_request_max, upload_too_large_message

MSG_FORM_TOO_LARGE = _("提交的内容过大（上限 {limit} KB），请返回重试。")


def _form_cap() -> int:
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE


@dataclass(frozen=True)
class BodyRule:
    """What a path takes as a body: at most `cap()` bytes (read when asked: settings change in
    tests), and with `caller_first` only from a caller known before it is read."""

    path: str  # a regular expression the whole path (leading slashes folded to one) must match
    cap: Callable[[], int]
    caller_first: bool = False
    too_large: Callable[[int], str] | None = None  # the 413's message, when not the generic one


# The first rule whose path matches applies.
BODY_RULES = (
    BodyRule(r"/api/v1/uploads", upload_request_max, caller_first=True, too_large=upload_too_large_message),
    BodyRule(r"/api/v1/auth/(?:token|sso)", _form_cap),  # a login: its body is the credentials
    BodyRule(r"/api/.*", _form_cap, caller_first=True),
    BodyRule(r"/v1/chat/completions", lambda: settings.OPENAI_API_BODY_MAX_BYTES, caller_first=True),
    BodyRule(r"/v1/.*", _form_cap, caller_first=True),
    BodyRule(r"/mcp/?", lambda: settings.MCP_MAX_BODY_BYTES),
    # Staff's documents for the knowledge base, several at once (knowledge_app.admin): only from a
    # signed-in session; whether it is staff's, the admin decides.
    BodyRule(r"/admin/knowledge_app/knowledgedocument/upload/", lambda: settings.KNOWLEDGE_UPLOAD_MAX_BYTES,
             caller_first=True),
    BodyRule(r".*", _form_cap),  # the page's and the admin's forms, the A2A server, the demo
)
_COMPILED = tuple((re.compile(rule.path, re.DOTALL), rule) for rule in BODY_RULES)


def body_rule(path: str) -> BodyRule:
    path = "/" + path.lstrip("/")
    return next(rule for pattern, rule in _COMPILED if pattern.fullmatch(path))


def _header(scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value
    return None


class Intake:
    """The ASGI layer in front of `app` (campus_agent.asgi)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        passed = await self._passed(scope, receive, send)
        if passed is not None:  # this frame holds nothing of the decision while a stream lasts
            await self.app(*passed, send)

    async def _passed(self, scope, receive, send):
        """What `app` is called with (`scope`, `receive`), or None when the request was refused
        (answered here) or its client went away."""
        request = ASGIRequest(scope, io.BytesIO())  # the head only: the body is still on the wire
        try:
            request.get_host()
        except DisallowedHost:
            logger.warning("refused: Host {!r} is not in ALLOWED_HOSTS", request.META.get("HTTP_HOST", "")[:100])
            await _refuse(request, send, lambda: errors.invalid_body(MSG_HOST_NOT_ALLOWED))
            return None
        declared = _header(scope, b"content-length")
        chunked = declared is None and _header(scope, b"transfer-encoding") is not None
        if declared in (None, b"0") and not chunked:
            return scope, receive  # no body: nothing to decide
        rule = body_rule(request.path_info)
        if rule.caller_first:
            try:
                caller = await acaller_known(request)
            except errors.ApiError as refused:  # fixed words (token_missing …): no language to choose
                await _refuse(request, send, lambda refused=refused: refused)
                return None
            if caller is not None:  # the views take it from here instead of looking it up again
                scope = {**scope, CALLER_SCOPE_KEY: caller}
        cap = rule.cap()
        if declared is not None:
            if int(declared) > cap:  # the server parsed it: digits
                await _refuse(request, send, lambda: _too_large(request, rule, cap))
                return None
            return scope, receive  # the server delivers no more than it declared
        body = await _body_up_to(receive, cap)
        if body is None:
            return None  # the client went away
        if len(body) > cap:
            await _refuse(request, send, lambda: _too_large(request, rule, cap))
            return None
        return scope, _replay(body, receive)


async def _body_up_to(receive, cap: int) -> bytes | None:
    """A body of unknown length (chunked), read until it ends or passes `cap` (then what was read,
    one piece past the cap); None when the client goes away. The apps behind read a body whole
    before they use it (Django, the MCP SDK, a2a-sdk), so reading it here first costs them nothing."""
    pieces, size = [], 0
    while size <= cap:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        piece = message.get("body", b"")
        pieces.append(piece)
        size += len(piece)
        if not message.get("more_body", False):
            break
    return b"".join(pieces)


def _replay(body: bytes, receive):
    """`receive` for the app: the body read already, then what the client sends next (its disconnect)."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed():
        return pending.pop() if pending else await receive()

    return replayed


def _too_large(request, rule: BodyRule, cap: int) -> errors.ApiError:
    if rule.too_large is not None:
        message = rule.too_large(cap)
    elif api_family(request.path_info) is None:
        message = MSG_FORM_TOO_LARGE.format(limit=cap // 1024)
    else:
        message = too_large(cap).message
    return errors.ApiError(message, code=errors.BODY_TOO_LARGE, status=413)


def _language(request) -> str:
    # As campus_agent.middleware.LocaleMiddleware chooses it: staff work in Chinese under /admin/.
    if request.path_info.startswith("/admin/"):
        return settings.LANGUAGE_CODE
    return translation.get_language_from_request(request)


async def _refuse(request, send, error: Callable[[], errors.ApiError]) -> None:
    """Answers `error()` in the shape of the request's API (campus_agent.refusals), in the
    request's language (chosen here: the middleware that sets it has not run), with its request
    id; logged as the middleware logs a request."""
    request_id = request_id_from_header(request.META.get("HTTP_X_REQUEST_ID"))
    # As the middleware logs it: a turn's request's `→` at DEBUG, its refusal's `←` at INFO.
    arrived = "DEBUG" if is_turn_request(request.method, request.path) else "INFO"
    started = request_begun(request_id, request.method, request.path, level=arrived)
    with translation.override(_language(request)):
        response = refusal_response(request, error())
    response[HEADER] = request_id
    response["Content-Length"] = str(len(response.content))
    headers = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in response.items()]
    # Logged before it is sent, as the middleware logs a response it returns: whoever reads the
    # answer finds its line already written.
    request_ended(request.method, request.path, response.status_code, started)
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": response.content})
