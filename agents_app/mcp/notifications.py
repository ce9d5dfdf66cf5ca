"""What an MCP server tells (or asks) a session besides its answers (docs/runtime.md, "MCP:
progress and notifications"):

- `notifications/progress` during a call: handled per call (tools.py, `progress_text`), shown
  live on the tool's chip as `tool_chunk` lines.
- `notifications/message` (the server's log): into our log, at most INFO… WARNING, its text
  flattened and capped, with the request id of the call it came with (`server_log_callback`).
- `notifications/tools/list_changed`: the service's cached tool list is dropped, so the next turn
  lists again (`server_message_handler` on a handshake-era session; on a 2026-07-28 session
  changes come only on a `subscriptions/listen` stream, which `tool_list_watch` keeps open).

- an elicitation (the server asks the user for input, in the call or as a 2026-07-28
  `InputRequiredResult`): answered by the person the calling task set (person.py), its answer
  checked against what the server asked (`elicitation_answer`); with no person at hand (no turn
  asks the student yet: issue 23, point 3) declined. The server gets a clear answer either way,
  and a 2026-07-28 retry carries the `requestState` it sent, as SEP-2322 asks.

The pool (pool.py) makes one set of these per session; tools.py marks each call in flight
(`mcp_call_in_flight`) so a log line can be given to the call it belongs to.
"""
from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter
from contextlib import contextmanager

import mcp_types as types
from loguru import logger
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from agents_app.mcp.tool_cache import mcp_tools_cache_drop
from agents_app.models import McpService
from campus_agent.base.redaction import clip_text
from campus_agent.base.request_id import NO_REQUEST_ID, request_id_get

# A server's log is its own view: its "error" is not ours, and a server must not be able to raise
# our alerts or flood them, so its levels map at most to WARNING.
LOG_LEVELS = {"debug": "DEBUG", "info": "INFO", "notice": "INFO", "warning": "WARNING", "error": "WARNING",
              "critical": "WARNING", "alert": "WARNING", "emergency": "WARNING"}
MAX_SERVER_LOG_CHARS = 500
# Lines per service per minute; past it the rest of the minute is dropped, and that is logged once.
MAX_SERVER_LOGS_PER_MINUTE = 120
# After a listen stream ended (the server closed it, the connection broke), listen again after this;
# a server that refuses the stream this many times in a row is not asked again by this session.
RELISTEN_SEC = 5.0
LISTEN_REFUSALS_MAX = 3

# service id -> request ids of the calls in flight on it (a Counter: two calls may share an id).
# Per process, whatever the event loop (each loop has its own pool, and may run in its own thread).
_in_flight: dict[int, Counter[str]] = {}
_in_flight_lock = threading.Lock()


@contextmanager
def mcp_call_in_flight(*, service_id: int, request_id: str):
    """Marks a call on the service in flight for the block (see server_log_callback)."""
    with _in_flight_lock:
        _in_flight.setdefault(service_id, Counter())[request_id] += 1
    try:
        yield
    finally:
        with _in_flight_lock:
            calls = _in_flight[service_id]
            calls[request_id] -= 1
            if calls[request_id] <= 0:
                del calls[request_id]


def _call_request_id(service: McpService) -> str:
    """The request id of the call a server notification belongs to, or NO_REQUEST_ID.

    Over HTTP a notification about a request comes on that request's own response stream, which
    the SDK reads in a copy of the calling turn's context: the ContextVar is that turn's id (a
    notification on the session's standalone stream carries the opener's instead, which is why it
    must also be a call in flight). A stdio pipe is read by the session's owner task for every
    call alike: there, only a sole call in flight tells whose it is."""
    with _in_flight_lock:
        calls = list(_in_flight.get(service.pk) or ())
    current = request_id_get()
    if service.protocol != McpService.Protocol.STDIO and current in calls:
        return current
    if len(calls) == 1:
        return calls[0]
    return NO_REQUEST_ID


def _log_text(data) -> str:
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, default=str)
    return clip_text(text, MAX_SERVER_LOG_CHARS)


class _Budget:
    """At most MAX_SERVER_LOGS_PER_MINUTE lines a minute."""

    def __init__(self):
        self.minute = -1
        self.used = 0

    def take(self) -> bool | None:
        """True: log it; None: the first one over the budget (say so once); False: drop it."""
        minute = int(asyncio.get_running_loop().time() // 60)
        if minute != self.minute:
            self.minute, self.used = minute, 0
        self.used += 1
        if self.used <= MAX_SERVER_LOGS_PER_MINUTE:
            return True
        return None if self.used == MAX_SERVER_LOGS_PER_MINUTE + 1 else False


def server_log_callback(service: McpService):
    """The session's `logging_callback`: a server's `notifications/message` into our log."""
    budget = _Budget()

    async def log(params: types.LoggingMessageNotificationParams) -> None:
        request_id = _call_request_id(service)
        allowed = budget.take()
        if allowed is None:
            logger.bind(request_id=request_id).warning(
                "MCP server log service={}: more than {} lines this minute, the rest of it dropped", service.name,
                MAX_SERVER_LOGS_PER_MINUTE)
        if not allowed:
            return
        level = LOG_LEVELS.get(str(params.level), "INFO")
        logger.bind(request_id=request_id).log(
            level, "MCP server log service={} level={} logger={} - {}", service.name, params.level,
            clip_text(params.logger or "-", 64), _log_text(params.data))

    return log


def server_message_handler(service: McpService):
    """The session's `message_handler`: the server's other notifications (and transport faults)."""

    async def handle(message) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            mcp_tools_cache_drop(service_id=service.pk)
            logger.info("MCP tools changed service={}: cached list dropped", service.name)
        elif isinstance(message, Exception):
            logger.debug("MCP transport fault service={} error={}", service.name, type(message).__name__)

    return handle


# SEP-1034: the primitive types whose `default` a client applies to a form it shows.
_DEFAULT_TYPES = {"string": str, "number": (int, float), "integer": int, "boolean": bool}
MAX_ELICITATION_FIELDS = 50  # a form with more is declined: no person fills in a hundred fields
MAX_ELICITATION_TEXT = 2000  # characters of one string answer


def _value_ok(value, field: dict) -> bool:
    """A value of the field's type: a primitive, or (a multi-select enum) a list of strings among
    the items' choices."""
    kind = field.get("type")
    if kind == "array":
        items = field.get("items") if isinstance(field.get("items"), dict) else {}
        choices = items.get("enum") if isinstance(items.get("enum"), list) else None
        return isinstance(value, list) and all(isinstance(v, str) and (choices is None or v in choices)
                                               for v in value)
    python_type = _DEFAULT_TYPES.get(kind)
    if python_type is None or isinstance(value, bool) and kind != "boolean":
        return False
    if not isinstance(value, python_type):
        return False
    return not isinstance(field.get("enum"), list) or value in field["enum"]


def elicitation_defaults(schema: dict) -> dict:
    """The defaults a form-mode request's schema gives its fields (SEP-1034): what the form shows
    filled in before the person changes anything. Only a primitive field's `default` of its own
    type (an enum's only if it is among the choices; a multi-select's only if all of it is)."""
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict):
        return {}
    return {name: field["default"] for name, field in properties.items()
            if isinstance(field, dict) and "default" in field and _value_ok(field["default"], field)}


def elicitation_content_problem(schema: dict, content) -> str | None:
    """Why an accepted form's content does not fit the request's schema (None when it does): every
    required field present, each value of its field's type (an enum's among its choices), no
    string longer than MAX_ELICITATION_TEXT."""
    if not isinstance(content, dict):
        return "content is not an object"
    properties = schema.get("properties") or {}
    for name in schema.get("required") or []:
        if name not in content:
            return f"{name} is required"
    for name, value in content.items():
        field = properties.get(name)
        if not isinstance(field, dict):
            return f"{name} was not asked for"
        if not _value_ok(value, field):
            return f"{name} is not a {field.get('type')} of its choices" if "enum" in field else \
                f"{name} is not a {field.get('type')}"
        if isinstance(value, str) and len(value) > MAX_ELICITATION_TEXT:
            return f"{name} is longer than {MAX_ELICITATION_TEXT} characters"
    return None


async def elicitation_answer(context, params: types.ElicitRequestParams) -> types.ElicitResult:
    """The session's `elicitation_callback`: the calling task's person answers (person.py); with
    nobody at hand, or a form too large to show, declined. An accepted form whose content does not
    fit what the server asked is declined instead of sent (a person's typo must not reach the
    server as a value of another type)."""
    from agents_app.mcp.person import person_now

    mode = getattr(params, "mode", None)
    message = clip_text(getattr(params, "message", ""), 100)
    person = person_now()
    schema = getattr(params, "requested_schema", None) or {}
    if person is None:
        logger.info("MCP elicitation declined (nobody to ask) mode={} message={}", mode, message)
        return types.ElicitResult(action="decline")
    if len(schema.get("properties") or {}) > MAX_ELICITATION_FIELDS:
        logger.warning("MCP elicitation declined (over {} fields) message={}", MAX_ELICITATION_FIELDS, message)
        return types.ElicitResult(action="decline")
    answer = await person.elicit(params)
    if answer.action == "accept" and mode != "url":
        problem = elicitation_content_problem(schema, answer.content or {})
        if problem is not None:
            logger.warning("MCP elicitation answer declined: {} message={}", problem, message)
            return types.ElicitResult(action="decline")
    logger.info("MCP elicitation answered action={} mode={} message={}", answer.action, mode, message)
    return answer


async def tool_list_watch(*, client, service: McpService) -> None:
    """On a 2026-07-28 session whose server announces tool list changes, keeps a
    `subscriptions/listen` stream open and drops the cached list on each change (handshake-era
    sessions get `notifications/tools/list_changed` through server_message_handler instead).
    Runs until cancelled (the session closing). A stream that ends is opened again; once it is,
    the list is dropped, since changes may have come meanwhile (not before: while the server is
    down the cached list keeps its tools offered, their calls failing readably)."""
    if client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return
    tools = client.server_capabilities.tools
    if not (tools and tools.list_changed):
        return
    refusals = 0
    lost = False
    while refusals < LISTEN_REFUSALS_MAX:
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                refusals = -1  # acknowledged: counted afresh once it ends
                if lost:  # changes may have come while there was no stream
                    mcp_tools_cache_drop(service_id=service.pk)
                logger.debug("MCP listening for tool list changes service={}", service.name)
                async for _event in subscription:
                    mcp_tools_cache_drop(service_id=service.pk)
                    logger.info("MCP tools changed service={}: cached list dropped", service.name)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the session's owner decides whether it is broken
            logger.info("MCP tool list stream ended service={} reason={}", service.name, type(exc).__name__)
        refusals += 1
        lost = True
        await asyncio.sleep(RELISTEN_SEC)
    logger.warning("MCP service={} refused {} tool list streams: changes are seen at its next save only",
                   service.name, LISTEN_REFUSALS_MAX)
