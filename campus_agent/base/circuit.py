"""A circuit breaker per downstream source (a sub-agent, an MCP service), shared by all workers.

A dead source would otherwise cost every turn that calls it its full timeout. The breaker:

    closed     calls go through; CIRCUIT_FAILURES consecutive failures within CIRCUIT_WINDOW_SEC
               (timeouts, connection errors, 5xx: the caller classifies) open it;
    open       calls are refused at once for CIRCUIT_COOLDOWN_SEC;
    half-open  after the cool-down exactly one call (the probe) goes through, the others are
               still refused; the probe's success closes the breaker, its failure opens it again.

State lives in the Django cache (Redis when REDIS_URL is set), so every worker sees the same
breaker, and only atomic operations decide a transition: `add` (set-if-absent) of the state
key opens it — the one worker whose `add` wins logs it — and of the probe key elects the probe;
`incr` counts failures; `delete` closes it, logged by the one whose delete removed the key.
Closed is the absence of a state key, so a closed source costs one `get_many` per call.

    ticket = circuit_enter(source=key, name="sub-agent canteen", lease_sec=35)  # None: refused
    ... call ...
    circuit_success(ticket) | circuit_failure(ticket, reason="timeout") | circuit_release(ticket)

The functions are sync (a cache round trip or two); the async twins cross the thread boundary
once per step.
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from enum import StrEnum

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.cache import cache
from loguru import logger

from campus_agent.base.windows import window_count

KEY_PREFIX = "circuit"
# The state outlives the cool-down so the admin can still say since when a source is down; a
# source nobody calls for this long is simply closed again.
STATE_TTL_SEC = 24 * 3600
REASON_MAX = 200
# Put before a tool's description while its breaker is open: the model then answers without it.
CIRCUIT_OPEN_DESCRIPTION = "【暂时不可用：该服务近期连续出错，现在调用会立即失败，请不要调用，直接告诉用户稍后再试】"


class CircuitState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half-open"


@dataclass(frozen=True, slots=True)
class CircuitStatus:
    """What the admin shows: the state, since when it is not closed, the last failure."""

    state: CircuitState
    opened_at: float | None = None
    last_failure_at: float | None = None
    last_reason: str = ""
    failures: int = 0  # consecutive failures counted in the current window


@dataclass(slots=True)
class CircuitTicket:
    """Permission for one call. `probe`: this call decides whether a half-open breaker closes."""

    source: str
    name: str
    probe: bool = False
    had_failures: bool = False
    settled: bool = False


def _keys(source: str) -> tuple[str, str, str, str]:
    base = f"{KEY_PREFIX}:{source}"
    return f"{base}:state", f"{base}:fails", f"{base}:last", f"{base}:probe"


def _cooldown_over(state: dict, now: float) -> bool:
    return now >= state["opened_at"] + settings.CIRCUIT_COOLDOWN_SEC


def circuit_enter(*, source: str, name: str, lease_sec: float) -> CircuitTicket | None:
    """A ticket for one call to `source`, or None when the breaker refuses it (open, or
    half-open with another call probing). `lease_sec`: how long a probe may take before
    another worker may probe instead (the source's timeout plus a margin: a probe whose
    worker died must not keep the breaker half-open forever)."""
    state_key, fails_key, _, probe_key = _keys(source)
    found = cache.get_many([state_key, fails_key])
    state = found.get(state_key)
    if state is None:
        return CircuitTicket(source=source, name=name, had_failures=fails_key in found)
    if not _cooldown_over(state, time.time()):
        return None
    if not cache.add(probe_key, uuid.uuid4().hex, max(1, int(lease_sec))):
        return None  # another call is probing
    logger.info("circuit half-open source={}: one probe call goes through", name)
    return CircuitTicket(source=source, name=name, probe=True, had_failures=True)


def circuit_success(ticket: CircuitTicket) -> None:
    """The source answered: consecutive failures start again from zero; a probe closes it."""
    if ticket.settled:
        return
    ticket.settled = True
    state_key, fails_key, _, probe_key = _keys(ticket.source)
    if ticket.probe:
        _close(ticket.source, ticket.name, why="probe answered")
    elif ticket.had_failures:
        cache.delete(fails_key)


def circuit_failure(ticket: CircuitTicket, *, reason: str) -> None:
    """The source failed (timeout, connection error, 5xx). Opens the breaker at the threshold;
    a failed probe opens it again for another cool-down."""
    if ticket.settled:
        return
    ticket.settled = True
    state_key, fails_key, last_key, probe_key = _keys(ticket.source)
    now = time.time()
    reason = reason[:REASON_MAX]
    cache.set(last_key, {"at": now, "reason": reason}, STATE_TTL_SEC)
    if ticket.probe:
        # Only the probe's holder gets here, so this is logged once.
        cache.set(state_key, {"opened_at": now}, STATE_TTL_SEC)
        cache.delete(probe_key)
        logger.warning("circuit open again source={}: the probe failed ({}); refusing calls for {}s",
                       ticket.name, reason, settings.CIRCUIT_COOLDOWN_SEC)
        return
    window = settings.CIRCUIT_WINDOW_SEC
    count = window_count(fails_key, window)
    if count >= settings.CIRCUIT_FAILURES and cache.add(state_key, {"opened_at": now}, STATE_TTL_SEC):
        logger.warning("circuit open source={}: {} consecutive failures within {}s, last: {}; refusing calls for {}s",
                       ticket.name, count, window, reason, settings.CIRCUIT_COOLDOWN_SEC)


def circuit_release(ticket: CircuitTicket) -> None:
    """The call ended without telling anything about the source (cancelled by a stop or the
    turn's budget): a probe lets another call probe at once."""
    if ticket.settled:
        return
    ticket.settled = True
    if ticket.probe:
        cache.delete(_keys(ticket.source)[3])


def _close(source: str, name: str, *, why: str) -> bool:
    state_key, fails_key, _, probe_key = _keys(source)
    closed = bool(cache.delete(state_key))  # True for exactly one of several racing closers
    cache.delete_many([fails_key, probe_key])
    if closed:
        logger.info("circuit closed source={}: {}", name, why)
    return closed


def circuit_close(*, source: str, name: str) -> bool:
    """Closes the breaker (the admin's health check saw the source answer). True when it was
    open or half-open."""
    return _close(source, name, why="health check answered")


def circuit_status(*, source: str) -> CircuitStatus:
    state_key, fails_key, last_key, probe_key = _keys(source)
    found = cache.get_many([state_key, fails_key, last_key])
    last = found.get(last_key) or {}
    common = {"last_failure_at": last.get("at"), "last_reason": last.get("reason", ""),
              "failures": int(found.get(fails_key) or 0)}
    state = found.get(state_key)
    if state is None:
        return CircuitStatus(CircuitState.CLOSED, **common)
    kind = CircuitState.HALF_OPEN if _cooldown_over(state, time.time()) else CircuitState.OPEN
    return CircuitStatus(kind, opened_at=state["opened_at"], **common)


STATE_TEXT = {CircuitState.CLOSED: "正常", CircuitState.OPEN: "熔断中", CircuitState.HALF_OPEN: "半开（等待试探）"}
SINCE_TEXT = "，自 {at}"
LAST_FAILURE_TEXT = "；最近失败 {at}：{reason}"
FAILURES_TEXT = "（连续失败 {count} 次）"


def _clock(at: float) -> str:
    from datetime import UTC, datetime

    from django.utils import timezone

    return timezone.localtime(datetime.fromtimestamp(at, tz=UTC)).strftime("%m-%d %H:%M:%S")


def circuit_status_text(status: CircuitStatus) -> str:
    """The admin's one-line summary: state, since when, the last failure."""
    text = STATE_TEXT[status.state]
    if status.state is CircuitState.CLOSED and status.failures:
        text += FAILURES_TEXT.format(count=status.failures)
    if status.opened_at is not None:
        text += SINCE_TEXT.format(at=_clock(status.opened_at))
    if status.last_failure_at is not None:
        text += LAST_FAILURE_TEXT.format(at=_clock(status.last_failure_at), reason=status.last_reason[:80])
    return text


def circuit_open_sources(*, sources: list[str]) -> set[str]:
    """Those of `sources` whose breaker refuses calls now (open, cool-down not over): one
    cache round trip for a whole turn's tools."""
    if not sources:
        return set()
    states = cache.get_many([_keys(s)[0] for s in sources])
    now = time.time()
    return {s for s in sources if (st := states.get(_keys(s)[0])) is not None and not _cooldown_over(st, now)}


# The async twins: one thread hop each (the cache API is sync). Not thread_sensitive: they
# touch no database connection, so they need not queue behind the ORM's one thread.
async def acircuit_enter(*, source: str, name: str, lease_sec: float) -> CircuitTicket | None:
    """See circuit_enter()."""
    return await sync_to_async(circuit_enter, thread_sensitive=False)(source=source, name=name, lease_sec=lease_sec)


async def acircuit_success(ticket: CircuitTicket) -> None:
    """See circuit_success()."""
    if not ticket.settled and (ticket.probe or ticket.had_failures):
        await sync_to_async(circuit_success, thread_sensitive=False)(ticket)
    ticket.settled = True


async def acircuit_failure(ticket: CircuitTicket, *, reason: str) -> None:
    """See circuit_failure()."""
    await sync_to_async(circuit_failure, thread_sensitive=False)(ticket, reason=reason)


async def acircuit_open_sources(*, sources: list[str]) -> set[str]:
    """See circuit_open_sources(). An agent without tools costs no thread hop."""
    if not sources:
        return set()
    return await sync_to_async(circuit_open_sources, thread_sensitive=False)(sources=sources)
