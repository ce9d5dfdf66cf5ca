"""The tool loop of one chat turn (DESIGN §6): a model round and a tool round, each a step that
yields its events as they happen and ends with the next step; `run_turn` chooses the next step."""
from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field

import httpx
import openai
from django.conf import settings
from loguru import logger

from agents_app.models import Agent
from agents_app.runtime.budget import BudgetSpent, turn_deadline, within
from agents_app.runtime.context import RunContext
from agents_app.runtime.events import Chunk, Done, Error, Event, ToolCall, ToolResult
from agents_app.runtime.llm import llm_stream
from agents_app.runtime.model_calls import ModelCall, model_call_merge, model_calls_finish
from agents_app.runtime.tool import Tool, tool_spec
from agents_app.runtime.tool_runs import tool_calls_run
from agents_app.runtime.tools import tools_for_agent
from campus_agent.errors import DOWNSTREAM
from campus_agent.request_id import request_id_set

NOT_CONFIGURED_REASON = "LLM_BASE_URL is not set"
MODEL_INTERRUPTED_TEXT = "AI 模型回答中断，请稍后重试。"
TURN_TIMEOUT_TEXT = "本轮回答超时，请稍后重试或换个问法。"
DOMAIN_HINT_TEXT = "提示：学生是从“{domain}”业务入口进入本对话的，问题不明确时优先考虑该业务域的工具。"
MODEL_REFUSED_TEXT = "AI 模型拒绝了请求（HTTP {status}），请联系管理员检查模型配置。"


def _model_down(exc: Exception) -> bool:
    """A failure keyword routing may stand in for: the model is unreachable, overloaded or slow
    (connection, timeout, 5xx, 429, an error inside the stream, the turn budget). A 4xx other
    than 429 is a configuration error (bad key, unknown model, rejected request): falling back
    would hide it from staff, so it is reported instead."""
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code >= 500 or exc.status_code == 429
    return True


def _system_prompt(agent: Agent, ctx: RunContext) -> str:
    """The agent's prompt, plus the conversation's domain hint (the entry the student came from,
    e.g. the canteen app's chat button) so the model prefers that domain's tools."""
    if not ctx.hint_domain:
        return agent.system_prompt
    return "\n\n".join(filter(None, [agent.system_prompt, DOMAIN_HINT_TEXT.format(domain=ctx.hint_domain)]))


class LlmUnavailable(Exception):
    """The model is not configured, or its first request failed before the turn yielded anything."""


def _usage_add(total: dict, usage) -> None:
    """Sums the rounds' usage, cached prompt tokens (`prompt_tokens_details.cached_tokens`, as
    OpenAI and DashScope report them) included."""
    if not isinstance(usage, dict):
        return
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        value = usage.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            total[key] = total.get(key, 0) + value
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if isinstance(cached, int) and not isinstance(cached, bool):
        summed = total.setdefault("prompt_tokens_details", {})
        summed["cached_tokens"] = summed.get("cached_tokens", 0) + cached


# --- what a step ends with: the loop's next step (openai-agents' NextStepFinalOutput /
# NextStepRunAgain; pydantic-ai's ModelRequestNode → CallToolsNode → ModelRequestNode | End) ---


@dataclass(frozen=True, slots=True)
class AskModel:
    """Make a model request (the turn's first, or after a tool round)."""


@dataclass(frozen=True, slots=True)
class RunTools:
    """The model asked for tools: run `calls`; `text` is what it said before asking."""

    calls: list[ModelCall]
    text: str


@dataclass(frozen=True, slots=True)
class FinalAnswer:
    """The model answered without tools: the turn is complete."""


@dataclass(frozen=True, slots=True)
class Interrupted:
    """The turn ends cut short; `error` tells the student why."""

    error: Error


NextStep = AskModel | RunTools | FinalAnswer | Interrupted


@dataclass
class _Turn:
    """What the steps of one turn share."""

    agent: Agent
    ctx: RunContext
    deadline: float  # event-loop time (budget.py)
    tools_by_name: dict[str, Tool]
    specs: list[dict]
    messages: list[dict]
    max_tool_rounds: int
    started: float  # perf_counter() at the turn's start, for the log
    tool_rounds: int = 0
    text_parts: list[str] = field(default_factory=list)  # all model text of the turn
    usage: dict = field(default_factory=dict)
    chart: dict | None = None  # the last chart a tool returned
    yielded: bool = False  # an event went out: a failing model can no longer be stood in for

    def done(self, *, interrupted: bool) -> Done:
        logger.info(
            "turn done agent={} tools={} interrupted={} usage={} cost_ms={:.0f}",
            self.agent.slug, len(self.tools_by_name), interrupted, self.usage,
            (time.perf_counter() - self.started) * 1000,
        )
        return Done(full_text="".join(self.text_parts), chart=self.chart, usage=self.usage, interrupted=interrupted)


async def run_turn(*, agent: Agent, history: list[dict], ctx: RunContext) -> AsyncIterator[Event]:
    """Runs the tool loop of one turn and yields its events; the last one is always `Done`.

    1. Refuse at once (LlmUnavailable) when no model is configured.
    2. Read the agent's enabled tools from the catalog (MCP lists cached, see tools_for_agent).
    3. messages = [system prompt] + history. The first step is AskModel.
    4. AskModel (`_model_round`): stream one model request (tools offered, tool_choice="auto"):
       text deltas are yielded as `Chunk`; tool-call fragments are merged by `index`; usage is
       summed. No tool calls → FinalAnswer; else → RunTools.
    5. RunTools (`_tool_round`): arguments that are not a JSON object become {} (the model is
       told in the tool result); yield one `ToolCall` per call; run all calls at once, yielding
       their `ToolChunk`s live and a `ToolResult` as each ends (a 40102 result also yields
       `Error(40102)`); a tool that raises becomes a failed result. Append the assistant message
       with `tool_calls`, then one `tool` message per call in the same order → AskModel.
    6. After `max_tool_rounds` rounds with tools, the model request offers no tools, so the
       model must answer in words (never a hang or an endless loop).
    7. FinalAnswer → yield `Done(full_text=all model text of the turn, chart=last chart a tool
       returned)`; Interrupted → yield its `Error`, then `Done(interrupted=True)`.

    Failures: if the first model request fails (connection, 5xx, 429, timeout) before anything
    was yielded → LlmUnavailable (the caller falls back). A 4xx other than 429 (a configuration
    error), any later model failure, or the turn budget (TURN_BUDGET_SEC) running out →
    Interrupted: `Error(50003)` + `Done(interrupted=True)`.
    """
    if not settings.LLM_BASE_URL:
        raise LlmUnavailable(NOT_CONFIGURED_REASON)
    request_id_set(ctx.request_id)
    turn = await _turn_start(agent=agent, history=history, ctx=ctx)
    step: NextStep | None = AskModel()
    while isinstance(step, AskModel | RunTools):
        events = _model_round(turn) if isinstance(step, AskModel) else _tool_round(turn, step)
        step = None
        async with aclosing(events):  # leaving the turn closes the step: its stream or tools stop
            async for item in events:  # the step's events, then the step it leads to
                if isinstance(item, NextStep):
                    step = item
                else:
                    yield item
        if step is None:
            raise RuntimeError(f"{events.__name__} ended without naming the next step")
    if isinstance(step, Interrupted):
        yield step.error
    yield turn.done(interrupted=isinstance(step, Interrupted))


async def _turn_start(*, agent: Agent, history: list[dict], ctx: RunContext) -> _Turn:
    started = time.perf_counter()
    deadline = turn_deadline(ctx)
    tools = await tools_for_agent(agent)
    messages = [{"role": "system", "content": prompt}] if (prompt := _system_prompt(agent, ctx)) else []
    return _Turn(
        agent=agent,
        ctx=ctx,
        deadline=deadline,
        tools_by_name={tool.name: tool for tool in tools},
        specs=[tool_spec(tool) for tool in tools],
        messages=messages + history,
        max_tool_rounds=agent.max_tool_rounds or settings.MAX_TOOL_ROUNDS,
        started=started,
    )


async def _model_round(turn: _Turn) -> AsyncIterator[Event | NextStep]:
    """One streamed model request: yields its text as `Chunk`s, then FinalAnswer, RunTools or
    Interrupted. Raises LlmUnavailable when the model is down before the turn yielded anything."""
    offered = turn.specs if turn.tool_rounds < turn.max_tool_rounds else None
    agent = turn.agent
    round_text: list[str] = []
    fragments: dict[int, ModelCall] = {}
    stream = None
    try:
        stream = await within(
            llm_stream(model=agent.effective_model, messages=turn.messages, tools=offered,
                       temperature=agent.temperature, request_id=turn.ctx.request_id),
            turn.deadline,
        )
        chunks = stream.__aiter__()
        while True:
            try:
                chunk = await within(chunks.__anext__(), turn.deadline)
            except StopAsyncIteration:
                break
            # Chunks are plain dicts (see LlmStream): any field may be missing or null.
            _usage_add(turn.usage, chunk.get("usage"))
            for choice in chunk.get("choices") or ():
                delta = choice.get("delta") if isinstance(choice, dict) else None
                if not isinstance(delta, dict):
                    continue
                content = delta.get("content")
                if content and isinstance(content, str):
                    text = Chunk(content=content)  # the event makes the text valid
                    round_text.append(text.content)
                    turn.text_parts.append(text.content)
                    turn.yielded = True
                    yield text
                for fragment in delta.get("tool_calls") or ():
                    if isinstance(fragment, dict):
                        model_call_merge(fragments, fragment)
    except (BudgetSpent, openai.APIError, httpx.HTTPError) as exc:
        yield _model_failed(turn, exc)
        return
    finally:
        if stream is not None:
            await stream.close()
    calls = model_calls_finish(fragments) if offered else []
    yield RunTools(calls=calls, text="".join(round_text)) if calls else FinalAnswer()


def _model_failed(turn: _Turn, exc: Exception) -> Interrupted:
    """What a failed model request means for the turn (raises LlmUnavailable when the caller's
    fallback may still answer instead)."""
    reason = "turn budget spent" if isinstance(exc, BudgetSpent) else f"{type(exc).__name__}: {exc}"
    logger.warning("model request failed round={} reason={}", turn.tool_rounds + 1, reason)
    if not _model_down(exc):
        logger.error("model refused the request: {} (check LLM_* settings and the agent's model)", reason)
        return Interrupted(Error(DOWNSTREAM, MODEL_REFUSED_TEXT.format(status=exc.status_code)))
    if not turn.yielded:
        raise LlmUnavailable(reason) from exc
    return Interrupted(Error(DOWNSTREAM, TURN_TIMEOUT_TEXT if isinstance(exc, BudgetSpent) else MODEL_INTERRUPTED_TEXT))


async def _tool_round(turn: _Turn, step: RunTools) -> AsyncIterator[Event | NextStep]:
    """Runs the calls the model asked for, all at once: yields a `ToolCall` each, then their
    `ToolChunk`s live and a `ToolResult` as each ends; appends the assistant `tool_calls`
    message and one `tool` message per call (call order); then AskModel, or Interrupted when
    the turn budget ran out first (the tools still running are cancelled)."""
    calls = step.calls
    logger.info("round={} tool calls={}", turn.tool_rounds + 1, [c.name for c in calls])
    for call in calls:
        turn.yielded = True
        yield ToolCall(call_id=call.id, tool=call.name, args=call.arguments)

    results: dict[str, ToolResult] = {}
    runs = tool_calls_run(calls=[c.request() for c in calls], tools_by_name=turn.tools_by_name, ctx=turn.ctx,
                          deadline=turn.deadline)
    try:
        async with aclosing(runs):  # closing the turn closes the runs: their tools are cancelled
            async for event in runs:
                if isinstance(event, ToolResult):
                    results[event.call_id] = event
                yield event
    except BudgetSpent:
        yield Interrupted(Error(DOWNSTREAM, TURN_TIMEOUT_TEXT))
        return

    turn.messages.append({"role": "assistant", "content": step.text or None,
                          "tool_calls": [c.message() for c in calls]})
    for call in calls:
        turn.messages.append({"role": "tool", "tool_call_id": call.id, "content": results[call.id].content})
        turn.chart = results[call.id].chart or turn.chart
    turn.tool_rounds += 1
    yield AskModel()
