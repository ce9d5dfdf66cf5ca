"""One request id per request, carried by a ContextVar that the log patcher reads.

A ContextVar set here is gone by the time a streamed body or a spawned task runs, so the
streaming generator and each tool run call `request_id_set()` again with the id they carry.
"""
import re
import time
import uuid
from contextvars import ContextVar

from loguru import logger

HEADER = "X-Request-Id"
META_KEY = "HTTP_X_REQUEST_ID"
# What a client's id may be (docs/design.md#cross-cutting-rules): nginx's `$request_id` is 32 hex, many clients send
# UUIDs. Nothing else is trusted into log lines, downstream headers and the 64-character column.
_CLIENT_ID = re.compile(r"[A-Za-z0-9-]{8,64}")

# The requests that start a turn: POST /api/v1/chat and POST /v1/chat/completions (under any
# script prefix). Their turn writes their one INFO line (chat_app.runs.turn_log): their `→`, and
# their `←` when a turn was admitted (a status below 400), are at DEBUG; a refusal has no turn
# line, so its `←` stays at INFO (docs/operations.md#logs).
TURN_PATH = re.compile(r"(?:^|/)(?:api/v1/chat|v1/chat/completions)$")

NO_REQUEST_ID = "-"  # what the ContextVar holds outside a request (a log line shows it)
_request_id: ContextVar[str] = ContextVar("request_id", default=NO_REQUEST_ID)


def request_id_new() -> str:
    return uuid.uuid4().hex[:16]


def request_id_get() -> str:
    return _request_id.get()


def request_id_set(value: str) -> None:
    _request_id.set(value)


def request_id_from_header(raw: str | None) -> str:
    """The client's id, as sent, when it is 8–64 characters of `[A-Za-z0-9-]`; else a fresh one."""
    value = (raw or "").strip()
    return value if _CLIENT_ID.fullmatch(value) else request_id_new()


def is_turn_request(method: str, path: str) -> bool:
    return method == "POST" and TURN_PATH.search(path) is not None


def request_begun(rid: str, method: str, path: str, *, level: str = "INFO") -> float:
    """Sets the request's id and logs its start; returns its start time (for `request_ended`).
    A request that starts a turn logs its lines at DEBUG: its turn's line says it (chat_app.runs.turn_log)."""
    request_id_set(rid)
    logger.log(level, "→ {} {}", method, path)
    return time.perf_counter()


def request_ended(method: str, path: str, status: int, started: float, *, level: str = "INFO") -> None:
    cost_ms = (time.perf_counter() - started) * 1000
    logger.log(level, "← {} {} status={} cost_ms={:.1f}", method, path, status, cost_ms)
