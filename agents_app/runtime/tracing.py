"""The spans of a turn, with the OpenTelemetry GenAI semantic conventions (docs/operations.md,
"Tracing"):

    invoke_agent <agent>        the run (chat_app's run task: `run_span`)
    ├── chat <model>            one model round (`model_round_traced`)
    ├── execute_tool <tool>     one tool call, whatever its kind (`tool_span`, in tool_runs.py)
    │   └── (the mcp SDK's "MCP send tools/call <tool>" span; a sub-agent's own spans)
    └── chat <model> …

Every span carries the request id (`campus.request_id`). Tool and model spans are siblings
under the run, as the conventions draw an agent: a tool span is the current span while its
tool runs (its own task), so what the tool sends (traceparent to a sub-agent, the MCP SDK's
client span and `_meta`) hangs under it. A model round's span is never made current: a round
is an async generator, whose frames run in the caller's context between yields.

While tracing is off (`campus_agent.base.tracing.tracer()` is None) each helper returns at once:
a shared null context manager, or the round's own generator untouched.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing, contextmanager, nullcontext
from contextvars import ContextVar
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from django.conf import settings
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from agents_app.runtime.context import RunContext
from agents_app.runtime.events import Error
from agents_app.runtime.tool import ToolOutcome
from campus_agent.base.metrics import LLM_REQUEST
from campus_agent.base.tracing import REQUEST_ID_ATTRIBUTE, tracer

if TYPE_CHECKING:
    from agents_app.models import Agent

PROVIDER = "openai"  # the API the model is spoken to with (any OpenAI-compatible endpoint)
TOOL_TYPE = "function"  # every tool reaches the model as a function tool
CANCELLED_ATTRIBUTE = "campus.cancelled"
ATTEMPT_EVENT = "campus.model.attempt"
# The model round's span while its stream is being opened (providers.py records each attempt on
# it). Set in the round's own context: the round runs in its caller's context (an async generator).
_ROUND_SPAN: ContextVar[trace.Span | None] = ContextVar("campus_model_round_span", default=None)


class _Off:
    """What a span helper yields while tracing is off: records nothing."""

    def outcome(self, outcome: ToolOutcome) -> None:
        pass

    def ended(self, *, interrupted: bool, stopped: bool, paused: bool = False) -> None:
        pass


_OFF_RECORD = nullcontext(_Off())


class _SpanRecord:
    def __init__(self, span: trace.Span):
        self.span = span

    def outcome(self, outcome: ToolOutcome) -> None:
        """A tool's result: ok, or failed with its contract code (error.type) or `tool_error`."""
        self.span.set_attribute("campus.tool.ok", outcome.ok)
        if not outcome.ok:
            self.span.set_attribute("error.type", str(outcome.code) if outcome.code is not None else "tool_error")
            self.span.set_status(Status(StatusCode.ERROR, outcome.error or None))

    def ended(self, *, interrupted: bool, stopped: bool, paused: bool = False) -> None:
        """How a run ended: cut short by a failure or the budget is an error; stopped by the
        student (`campus.run.stopped`) is interrupted but not an error; `campus.run.paused`: it
        waits for approval, and its resumption is a run span of its own (same `campus.run_id`)."""
        self.span.set_attribute("campus.run.interrupted", interrupted)
        self.span.set_attribute("campus.run.stopped", stopped)
        self.span.set_attribute("campus.run.paused", paused)
        if interrupted and not stopped:
            self.span.set_status(Status(StatusCode.ERROR, "interrupted"))


@contextmanager
def _current(span: trace.Span) -> Iterator[_SpanRecord]:
    """Makes `span` current until the block ends, then ends it. Only in a coroutine of its own
    task (a run, a tool), never across an async generator's yield. A cancellation (a stop,
    the turn's budget) is marked on the span; OpenTelemetry records only Exceptions."""
    try:
        with trace.use_span(span):  # records an Exception and sets the ERROR status
            yield _SpanRecord(span)
    except asyncio.CancelledError:
        span.set_attribute(CANCELLED_ATTRIBUTE, True)
        raise
    finally:
        span.end()


def run_span(*, agent: Agent, ctx: RunContext, run_id) -> Iterator[_SpanRecord | _Off]:
    """The span of a whole run (`with run_span(...) as record: …; record.ended(…)`)."""
    return _span_start(lambda: (f"invoke_agent {agent.name}", {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": PROVIDER,
        "gen_ai.agent.name": agent.name,
        "gen_ai.agent.id": agent.slug,
        "gen_ai.request.model": agent.effective_model,
        "gen_ai.conversation.id": str(ctx.conversation_id),
        "campus.run_id": str(run_id),
        REQUEST_ID_ATTRIBUTE: ctx.request_id,
    }))


def tool_span(*, request, tool, ctx: RunContext) -> Iterator[_SpanRecord | _Off]:
    """The span of one tool call (`request`: tool_runs.ToolRequest), current while the tool
    runs (`record.outcome(outcome)` at the end). `tool` is None for a name the model made up. The kind (`campus.tool.kind`: mcp,
    subagent, a2a …) is the tool's optional `trace_kind`, so the loop never asks for a class."""
    return _span_start(lambda: (f"execute_tool {request.tool}", {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": request.tool,
        "gen_ai.tool.call.id": request.call_id,
        "gen_ai.tool.type": TOOL_TYPE,
        "campus.tool.kind": getattr(tool, "trace_kind", "unknown") if tool is not None else "unknown",
        REQUEST_ID_ATTRIBUTE: ctx.request_id,
    }))


def _span_start(describe) -> Iterator[_SpanRecord | _Off]:
    """A span made current for a `with` block; `describe()` → (name, attributes) is called only
    while tracing is on, so tracing off costs one check."""
    active = tracer()
    if active is None:
        return _OFF_RECORD
    name, attributes = describe()
    return _current(active.start_span(name, kind=SpanKind.INTERNAL, attributes=attributes))


def _server(url: str) -> dict:
    parts = urlsplit(url)
    if not parts.hostname:
        return {}
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return {"server.address": parts.hostname, "server.port": port}


def model_round_traced(turn, events: AsyncIterator) -> AsyncIterator:
    """`events` (one model round of `turn`, loop._Turn) timed for the metrics
    (`campus_agent_llm_request_seconds`), inside a `chat <model>` span while tracing is on."""
    active = tracer()
    return _model_round_timed(events if active is None else _model_round_traced(active, turn, events))


async def _model_round_timed(events: AsyncIterator) -> AsyncIterator:
    started = time.perf_counter()
    try:
        async with aclosing(events):
            async for item in events:
                yield item
    finally:
        LLM_REQUEST.observe(time.perf_counter() - started)


def model_attempt_traced(*, provider: str, model: str, base_url: str, attempt: int, outcome: str,
                         wait: float | None = None, answered: bool = False) -> None:
    """One attempt to open a model stream (providers.py), as an event of the round's span; the
    attempt that answered also names its provider, model and server on the span. Nothing while
    tracing is off. Never the key: it is not among the arguments."""
    span = _ROUND_SPAN.get()
    if span is None or not span.is_recording():
        return
    attributes = {"campus.model.provider": provider, "campus.model.name": model, "campus.model.attempt": attempt,
                  "campus.model.outcome": outcome[:300]}
    if wait is not None:
        attributes["campus.model.retry_in_sec"] = wait
    span.add_event(ATTEMPT_EVENT, attributes)
    if answered:
        span.set_attributes({"campus.model.provider": provider, "gen_ai.response.model": model,
                             "campus.model.attempts": attempt, **_server(base_url)})


_USAGE_ATTRIBUTES = (("prompt_tokens", "gen_ai.usage.input_tokens"), ("completion_tokens", "gen_ai.usage.output_tokens"))


async def _model_round_traced(active: trace.Tracer, turn, events: AsyncIterator) -> AsyncIterator:
    agent = turn.agent
    model = agent.effective_model
    attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": PROVIDER,
        "gen_ai.system": PROVIDER,  # the name before gen_ai.provider.name; many backends still read it
        "gen_ai.request.model": model,
        "gen_ai.request.temperature": agent.temperature,
        "gen_ai.request.max_tokens": settings.LLM_MAX_TOKENS,
        "gen_ai.conversation.id": str(turn.ctx.conversation_id),
        "campus.round": turn.tool_rounds + 1,
        "campus.tools_offered": len(turn.specs) if turn.tool_rounds < turn.max_tool_rounds else 0,
        REQUEST_ID_ATTRIBUTE: turn.ctx.request_id,
        **_server(settings.LLM_BASE_URL),
    }
    span = active.start_span(f"chat {model}", kind=SpanKind.CLIENT, attributes=attributes)
    # The turn sums usage over its rounds (loop._usage_add); this round's share is the difference.
    before = {key: turn.usage.get(key) for key, _ in _USAGE_ATTRIBUTES}
    _ROUND_SPAN.set(span)
    try:
        async with aclosing(events):
            async for item in events:
                # The round ends with its next step (loop.py, which imports this module, so the
                # steps are known by shape): RunTools has `calls`, Interrupted an `error` event.
                if isinstance(calls := getattr(item, "calls", None), list):
                    span.set_attribute("campus.tool_calls", len(calls))
                elif isinstance(error := getattr(item, "error", None), Error):
                    span.set_attribute("error.type", str(error.code))
                    span.set_status(Status(StatusCode.ERROR, error.message))
                yield item
    except asyncio.CancelledError:
        span.set_attribute(CANCELLED_ATTRIBUTE, True)
        raise
    except Exception as exc:  # LlmUnavailable: the model is down before the turn said anything
        cause = exc.__cause__ or exc
        span.set_attribute("error.type", type(cause).__qualname__)
        span.set_status(Status(StatusCode.ERROR, str(exc)))
        raise
    finally:
        for key, name in _USAGE_ATTRIBUTES:
            after = turn.usage.get(key)
            if isinstance(after, int) and after != before[key]:  # the model reported usage
                span.set_attribute(name, after - (before[key] or 0))
        span.end()
        _ROUND_SPAN.set(None)
