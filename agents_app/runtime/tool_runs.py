"""Running tool calls for a turn: the one place a tool is started, relayed and stopped.

The tool loop runs each round's calls with it (several at once); keyword routing (fallback.py)
runs its one call with it, so both stream and fail the same way.
"""
import asyncio
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, replace

from django.utils.translation import gettext_lazy as _
from loguru import logger

from agents_app.runtime.budget import within
from agents_app.runtime.caps import cap, text_cap
from agents_app.runtime.context import RunContext
from agents_app.runtime.events import Error, ToolChunk, ToolResult
from agents_app.runtime.tool import Tool, ToolOutcome
from agents_app.runtime.tracing import tool_span
from campus_agent.base.metrics import tool_call_counted
from campus_agent.base.request_id import request_id_set

UNKNOWN_TOOL_TEXT = _("没有名为“{name}”的工具，请只使用提供的工具。")
TOOL_CRASHED_TEXT = _("工具运行出错：{reason}")
# What the student's notice of a failed tool may hold (it is one sentence; the model's text is capped
# by MAX_TOOL_RESULT_BYTES).
MAX_NOTICE_BYTES = 2048
UNKNOWN_TOOL_LABELS = {"tool": "unknown", "kind": "unknown"}


@dataclass(frozen=True, slots=True)
class ToolRequest:
    """One call to run: `note` (when set) is put before the tool's text, for the model.
    `refused` (the model's text, the student's): the call is not run, this is its result (a bad
    call, arguments too long; model_calls.py)."""

    call_id: str
    tool: str
    args: dict
    note: str = ""
    refused: tuple[str, str] | None = None
    # The student's answers to the questions this call's server asked before (an elicitation
    # the turn waited for): the call runs again and they answer the same questions.
    answers: tuple[dict, ...] = ()


async def _outcome(request: ToolRequest, tool: Tool | None, ctx: RunContext, emit) -> ToolOutcome:
    if request.refused is not None:
        return ToolOutcome(text=request.refused[0], ok=False, error=request.refused[1])
    if tool is None:
        text = UNKNOWN_TOOL_TEXT.format(name=request.tool)
        return ToolOutcome(text=text, ok=False, error=text)
    try:
        return await tool.run(request.args, ctx, emit)
    except Exception as exc:  # noqa: BLE001 - a crashing tool is a result, not a dead turn
        logger.exception("tool {} raised", request.tool)
        # The model reads the message; the user is shown the exception's type only.
        text = TOOL_CRASHED_TEXT.format(reason=f"{type(exc).__name__}: {exc}")
        return ToolOutcome(text=text, ok=False, error=TOOL_CRASHED_TEXT.format(reason=type(exc).__name__))


async def tool_calls_run(
    *, calls: Sequence[ToolRequest], tools_by_name: Mapping[str, Tool], ctx: RunContext, deadline: float
) -> AsyncIterator[ToolChunk | ToolResult | Error]:
    """Runs all `calls` at once and yields, as they happen, each tool's live text (`ToolChunk`)
    and, as each ends, its `ToolResult` (followed by an `Error` with its code — 40102 when the campus token
    expired). A tool that raises or is unknown becomes a failed result.

    Raises BudgetSpent when `deadline` (event-loop time) passes first. Whenever the generator
    stops early (budget, or the client went away: use `contextlib.aclosing`), the tools still
    running are cancelled.
    """
    queue: asyncio.Queue = asyncio.Queue()

    async def run_one(request: ToolRequest) -> None:
        request_id_set(ctx.request_id)  # a task does not see the request's ContextVar value

        async def emit(text: str) -> None:
            await queue.put(ToolChunk(call_id=request.call_id, tool=request.tool, content=text))

        tool = tools_by_name.get(request.tool) if request.refused is None else None
        # Labels from the catalog only: a name the model made up would grow the metrics forever.
        labels = {"tool": tool.name, "kind": getattr(tool, "trace_kind", "other")} if tool else UNKNOWN_TOOL_LABELS
        started = time.perf_counter()
        call_ctx = replace(ctx, elicitation_answers=request.answers) if request.answers else ctx
        try:
            with tool_span(request=request, tool=tool, ctx=ctx) as span:  # what the tool sends hangs under it
                outcome = await _outcome(request, tool, call_ctx, emit)
                span.outcome(outcome)
        except asyncio.CancelledError:
            tool_call_counted(**labels, outcome="cancelled")
            raise
        tool_call_counted(**labels, outcome="ok" if outcome.ok else "failed", seconds=time.perf_counter() - started)
        if request.note:
            outcome = replace(outcome, text=f"{request.note}\n{outcome.text}")
        await queue.put((request, outcome))

    max_result = cap("MAX_TOOL_RESULT_BYTES")
    tasks = [asyncio.create_task(run_one(request)) for request in calls]
    try:
        ended = 0
        while ended < len(calls):
            item = await within(queue.get(), deadline)
            if isinstance(item, ToolChunk):
                yield item
                continue
            ended += 1
            request, outcome = item
            # Whatever the tool sent, the model reads (and the row stores) at most the cap.
            yield ToolResult(call_id=request.call_id, tool=request.tool, ok=outcome.ok,
                             content=text_cap(outcome.text, max_result),
                             error=text_cap(outcome.error, MAX_NOTICE_BYTES) if outcome.error else outcome.error, chart=outcome.chart, links=outcome.links or None,
                             images=outcome.images or None, label=outcome.label, sources=outcome.sources or None, shown=outcome.shown,
                             authorization=outcome.authorization, elicitation=outcome.elicitation)
            if outcome.code is not None:  # a failure with a contract code (40102, 50001, 50003)
                yield Error(outcome.code, outcome.error or outcome.text)
    finally:
        for task in tasks:  # the client went away or the budget ran out: stop the tools too
            if not task.done():
                task.cancel()
