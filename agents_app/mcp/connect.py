"""Open an MCP client for an McpService row, whatever its transport."""
from __future__ import annotations

import atexit
import contextvars
import hashlib
import json
import os
import shutil
import sys
import tempfile
import threading
from contextlib import AsyncExitStack, contextmanager
from dataclasses import dataclass
from typing import TypeVar

import httpx2
from django.conf import settings
from mcp import Client, StdioServerParameters
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_types import Implementation

from agents_app.models import McpService
from campus_agent.base.request_id import NO_REQUEST_ID, request_id_get
from campus_agent.base.tracing import trace_headers_add
from campus_agent.base.version import PRODUCT_NAME, PRODUCT_TITLE, VERSION

# A pooled HTTP session idles between turns; the stream may stay quiet that long.
IDLE_READ_TIMEOUT = 3600.0
# The request id in a request's `_meta` (docs/runtime.md, "Request id and trace context"): a
# prefixed key in reverse-DNS form, as the spec asks of keys that are not MCP's own.
REQUEST_ID_META_KEY = "cn.edu.campus-agent/request-id"
STDIO_WORKDIR_PREFIX = "campus-agent-mcp-"
# Who the servers see calling: `clientInfo` (the handshake's, and on 2026-07-28 each request's
# `_meta`), instead of the SDK's default "mcp 0.1.0".
CLIENT_INFO = Implementation(name=PRODUCT_NAME, title=PRODUCT_TITLE, version=VERSION)

E = TypeVar("E", bound=BaseException)

_stdio_workdir: str | None = None
_stdio_workdir_lock = threading.Lock()


def mcp_service_fingerprint(service: McpService) -> str:
    """Changes whenever the service is saved: a session or tool list made under another
    fingerprint is stale (this also covers workers that did not receive the save signal)."""
    raw = json.dumps(
        [service.pk, service.protocol, service.config, service.timeout_sec, str(service.updated_at)],
        sort_keys=True,
        default=str,
    )
    return hashlib.sha1(raw.encode()).hexdigest()


def stdio_workdir() -> str:
    """The working directory of stdio servers whose config names no `cwd`: one empty private
    directory (0700) per process, made at the first spawn. Never the project directory, where
    `.env` (SECRET_KEY, database password) is readable by a relative path. Made again if
    something (a /tmp cleaner) removed it while the worker ran."""
    global _stdio_workdir
    with _stdio_workdir_lock:
        if _stdio_workdir is None or not os.path.isdir(_stdio_workdir):
            _stdio_workdir = tempfile.mkdtemp(prefix=STDIO_WORKDIR_PREFIX)
            atexit.register(shutil.rmtree, _stdio_workdir, ignore_errors=True)
        return _stdio_workdir


def stdio_parameters(config: dict) -> StdioServerParameters:
    """argv list, no shell; the child gets the SDK's minimal environment (PATH, HOME …) plus
    only the variables the config names, never the gateway's SECRET_KEY or database URL, and
    starts in the config's `cwd` (set by a superuser) or else in `stdio_workdir()`."""
    return StdioServerParameters(
        command=config["command"],
        args=list(config.get("args", [])),
        env=dict(config.get("env", {})) or None,
        cwd=config.get("cwd") or stdio_workdir(),
    )


def mcp_request_meta() -> dict | None:
    """The `_meta` of a request made for the running turn: its request id (every transport).
    The SDK adds its own keys beside it (the 2026-07-28 envelope, a traceparent)."""
    request_id = request_id_get()
    return None if request_id == NO_REQUEST_ID else {REQUEST_ID_META_KEY: request_id}


async def _request_headers_add(request: httpx2.Request) -> None:
    # Sessions are pooled and shared by turns, so the client's default headers cannot carry a
    # turn's id. Both HTTP transports send each message from a task that runs in a copy of the
    # sender's context (mcp.shared._context_streams), so here the ContextVars are the calling
    # turn's: its request id and, while tracing, the SDK's client span of this request.
    trace_headers_add(request.headers)


@dataclass
class HttpStatusSeen:
    """The last HTTP error status (≥ 400) an MCP HTTP transport got while it was watched."""

    status: int | None = None


# Read below the SDK: mcp 2.3's streamable-http transport turns every non-2xx answer into one
# generic MCPError ("Server returned an error response"), and its SSE transport only logs a failed
# POST, so the status is taken from the HTTP client's response hook. The hook runs in a copy of the
# sending task's context (as the request hook does), which holds the same HttpStatusSeen object
# the caller put there: the copy shares the object, so the caller sees what the hook wrote.
_status_seen: contextvars.ContextVar[HttpStatusSeen | None] = contextvars.ContextVar("mcp_http_status",
                                                                                    default=None)


@contextmanager
def mcp_http_status_watch():
    """Within the block, the HTTP error status of this task's MCP requests (and of the tasks it
    starts) lands in the yielded HttpStatusSeen."""
    seen = HttpStatusSeen()
    token = _status_seen.set(seen)
    try:
        yield seen
    finally:
        _status_seen.reset(token)


async def _response_status_note(response: httpx2.Response) -> None:
    seen = _status_seen.get()
    if seen is not None and response.status_code >= 400:
        seen.status = response.status_code


def mcp_http_client(headers: dict | None = None, timeout: httpx2.Timeout | None = None,
                    auth: httpx2.Auth | None = None) -> httpx2.AsyncClient:
    """The SDK's HTTP client for MCP, plus a request hook that puts `X-Request-Id` (and, while
    tracing, `traceparent`) on every request it sends, per call, and a response hook that notes
    an HTTP error status for the watching caller (mcp_http_status_watch)."""
    client = create_mcp_http_client(headers=headers, timeout=timeout, auth=auth)
    client.event_hooks["request"].append(_request_headers_add)
    client.event_hooks["response"].append(_response_status_note)
    return client


async def mcp_client_enter(*, service: McpService, stack: AsyncExitStack, errlog=None, logging_callback=None,
                           message_handler=None, elicitation_callback=None, auth: httpx2.Auth | None = None) -> Client:
    """Enters a connected, initialised `mcp.Client` on `stack` (exit it in the same task), which
    introduces itself as CLIENT_INFO and asks 2026-07-28 servers for their log from
    `MCP_SERVER_LOG_LEVEL` up. `errlog`: a file for a stdio server's stderr (default: this
    process's); `logging_callback`, `message_handler`, `elicitation_callback`: the session's
    (notifications.py); `auth`: the HTTP transports' authentication (a student's OAuth, oauth.py)."""
    config = service.config or {}
    timeout = float(service.timeout_sec)
    if service.protocol == McpService.Protocol.STDIO:
        transport = stdio_client_transport(config, errlog=errlog)
    elif service.protocol == McpService.Protocol.SSE:
        transport = sse_client(
            config["url"], headers=config.get("headers") or None, timeout=timeout, sse_read_timeout=IDLE_READ_TIMEOUT,
            httpx_client_factory=mcp_http_client, auth=auth,
        )
    elif service.protocol == McpService.Protocol.STREAMABLE_HTTP:
        http = mcp_http_client(
            headers=config.get("headers") or None, timeout=httpx2.Timeout(timeout, read=IDLE_READ_TIMEOUT), auth=auth
        )
        await stack.enter_async_context(http)
        transport = streamable_http_client(config["url"], http_client=http)
    else:
        raise ValueError(f"unknown MCP protocol {service.protocol!r}")
    client = Client(
        transport, read_timeout_seconds=timeout, client_info=CLIENT_INFO, log_level=settings.MCP_SERVER_LOG_LEVEL or None,
        logging_callback=logging_callback, message_handler=message_handler, elicitation_callback=elicitation_callback,
    )
    return await stack.enter_async_context(client)


def stdio_client_transport(config: dict, *, errlog=None):
    from mcp.client.stdio import stdio_client

    return stdio_client(stdio_parameters(config), errlog=errlog or sys.stderr)


STDERR_TAIL_CHARS = 2000


def stderr_tail(errlog) -> str:
    """The last STDERR_TAIL_CHARS of what a stdio server wrote to `errlog` (a temporary file), on
    one line per line of it: what staff need to see when it would not start."""
    try:
        errlog.flush()
        errlog.seek(0)
        text = errlog.read()
    except (OSError, ValueError):
        return ""
    lines = [line.strip() for line in text[-STDERR_TAIL_CHARS:].splitlines() if line.strip()]
    return " / ".join(lines)


def exception_in(exc: BaseException, kind: type[E]) -> E | None:
    """The `kind` exception behind what the SDK raised, looking through its groups and causes."""
    stack, seen = [exc], 0
    while stack and seen < 20:
        current = stack.pop()
        seen += 1
        if isinstance(current, kind):
            return current
        if isinstance(current, BaseExceptionGroup):
            stack.extend(current.exceptions)
        for linked in (current.__cause__, current.__context__):
            if linked is not None:
                stack.append(linked)
    return None


def exception_text(exc: BaseException) -> str:
    """A readable reason from what the SDK raised (anyio task groups wrap errors in groups)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
