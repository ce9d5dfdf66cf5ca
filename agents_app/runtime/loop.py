"""The tool loop of one chat turn (DESIGN §6)."""
from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace

import httpx
import openai
from django.conf import settings
from loguru import logger

from agents_app.models import Agent
from agents_app.runtime.context import RunContext
from agents_app.runtime.events import (
    Chunk,
    Done,
    Error,
    Event,
    ToolCall,
    ToolChunk,
    ToolResult,
)
from agents_app.runtime.llm import llm_stream
from agents_app.runtime.tools import Tool, ToolOutcome, tool_spec, tools_for_agent
from campus_agent.errors import CAMPUS_TOKEN_EXPIRED, DOWNSTREAM
from campus_agent.request_id import request_id_set

NOT_CONFIGURED_REASON = "LLM_BASE_URL is not set"
MODEL_INTERRUPTED_TEXT = "AI 模型回答中断，请稍后重试。"
TURN_TIMEOUT_TEXT = "本轮回答超时，请稍后重试或换个问法。"
BAD_ARGUMENTS_NOTE = "注意：调用参数不是 JSON 对象，已按空参数 {} 调用。"
UNKNOWN_TOOL_TEXT = "没有名为“{name}”的工具，请只使用提供的工具。"
TOOL_CRASHED_TEXT = "工具运行出错：{reason}"


class LlmUnavailable(Exception):
    """The model is not configured, or its first request failed before the turn yielded anything."""


@dataclass
class _Call:
    """One tool call as the model streamed it, merged by index."""

    id: str = ""
    name: str = ""
    arguments: str = ""
    args: dict = field(default_factory=dict)
    args_ok: bool = True

    def finish(self) -> None:
        try:
            parsed = json.loads(self.arguments) if self.arguments.strip() else {}
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            self.args = parsed
        else:
            self.args, self.args_ok, self.arguments = {}, False, "{}"
        if not self.arguments.strip():
            self.arguments = "{}"

    def message(self) -> dict:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


class _BudgetSpent(Exception):
    """The turn's wall-clock budget (TURN_BUDGET_SEC) ran out."""


async def _within(awaitable, deadline: float):
    """Awaits one step under the turn deadline. Only steps are bounded, never a `yield`: a
    timeout spanning a yield would cancel the consumer's task at an unrelated await."""
    scope = asyncio.timeout_at(deadline)
    try:
        async with scope:
            return await awaitable
    except TimeoutError:
        if scope.expired():
            raise _BudgetSpent from None
        raise


def _usage_add(total: dict, usage) -> None:
    if usage is None:
        return
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        value = getattr(usage, key, None)
        if isinstance(value, int):
            total[key] = total.get(key, 0) + value


def _merge_fragment(calls: dict[int, _Call], fragment) -> None:
    call = calls.setdefault(fragment.index if fragment.index is not None else len(calls), _Call())
    if fragment.id:
        call.id = fragment.id
    function = fragment.function
    if function is not None:
        if function.name and not call.name:
            call.name = function.name
        if function.arguments:
            call.arguments += function.arguments


def _finish_calls(fragments: dict[int, _Call]) -> list[_Call]:
    calls, seen = [], set()
    for index in sorted(fragments):
        call = fragments[index]
        if not call.name:
            continue
        if not call.id or call.id in seen:  # ids must pair each tool message with its call
            call.id = f"call_{uuid.uuid4().hex[:16]}"
        seen.add(call.id)
        call.finish()
        calls.append(call)
    return calls


async def _run_one(call: _Call, tool: Tool | None, ctx: RunContext, queue: asyncio.Queue) -> None:
    request_id_set(ctx.request_id)  # a task does not see the request's ContextVar value

    async def emit(text: str) -> None:
        await queue.put(ToolChunk(call_id=call.id, tool=call.name, content=text))

    if tool is None:
        text = UNKNOWN_TOOL_TEXT.format(name=call.name)
        outcome = ToolOutcome(text=text, ok=False, error=text)
    else:
        try:
            outcome = await tool.run(call.args, ctx, emit)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a crashing tool is a result the model reads
            logger.exception("tool {} raised", call.name)
            text = TOOL_CRASHED_TEXT.format(reason=f"{type(exc).__name__}: {exc}")
            outcome = ToolOutcome(text=text, ok=False, error=TOOL_CRASHED_TEXT.format(reason=type(exc).__name__))
    if not call.args_ok:
        outcome = replace(outcome, text=f"{BAD_ARGUMENTS_NOTE}\n{outcome.text}")
    await queue.put((call, outcome))


async def run_turn(*, agent: Agent, history: list[dict], ctx: RunContext) -> AsyncIterator[Event]:
    """Runs the tool loop of one turn and yields its events; the last one is always `Done`.

    1. Refuse at once (LlmUnavailable) when no model is configured.
    2. Read the agent's enabled tools from the catalog (MCP lists cached, see tools_for_agent).
    3. messages = [system prompt] + history.
    4. Stream one model request (tools offered, tool_choice="auto"): text deltas are yielded as
       `Chunk`; tool-call fragments are merged by `index`; usage is summed.
    5. No tool calls → done. Otherwise: arguments that are not a JSON object become {} (the
       model is told in the tool result); yield one `ToolCall` per call; run all calls at once,
       yielding their `ToolChunk`s live and a `ToolResult` as each ends (a 40102 result also
       yields `Error(40102)`); a tool that raises becomes a failed result.
    6. Append the assistant message with `tool_calls`, then one `tool` message per call in the
       same order, and go to 4.
    7. After `max_tool_rounds` rounds with tools, one last request is made without tools, so the
       model must answer in words (never a hang or an endless loop).
    8. Yield `Done(full_text=all model text of the turn, chart=last chart a tool returned)`.

    Failures: if the first model request fails (connection, 5xx, 429, timeout) before anything
    was yielded → LlmUnavailable (the caller falls back). Any later model failure, or the turn
    budget (TURN_BUDGET_SEC) running out → `Error(50003)` + `Done(interrupted=True)`.
    """
    if not settings.LLM_BASE_URL:
        raise LlmUnavailable(NOT_CONFIGURED_REASON)
    request_id_set(ctx.request_id)
    started = time.perf_counter()
    deadline = asyncio.get_running_loop().time() + settings.TURN_BUDGET_SEC
    tools = await tools_for_agent(agent)
    by_name = {tool.name: tool for tool in tools}
    specs = [tool_spec(tool) for tool in tools]
    messages: list[dict] = [{"role": "system", "content": agent.system_prompt}] if agent.system_prompt else []
    messages += history
    max_rounds = agent.max_tool_rounds or settings.MAX_TOOL_ROUNDS
    text_parts: list[str] = []
    usage: dict = {}
    chart: dict | None = None
    yielded = False

    def ended(*, interrupted: bool) -> Done:
        logger.info(
            "turn done agent={} tools={} interrupted={} usage={} cost_ms={:.0f}",
            agent.slug, len(tools), interrupted, usage, (time.perf_counter() - started) * 1000,
        )
        return Done(full_text="".join(text_parts), chart=chart, usage=usage, interrupted=interrupted)

    for round_no in range(max_rounds + 1):
        offered = specs if round_no < max_rounds else None
        round_text: list[str] = []
        fragments: dict[int, _Call] = {}
        stream = None
        try:
            stream = await _within(
                llm_stream(model=agent.effective_model, messages=messages, tools=offered,
                           temperature=agent.temperature, request_id=ctx.request_id),
                deadline,
            )
            chunks = stream.__aiter__()
            while True:
                try:
                    chunk = await _within(chunks.__anext__(), deadline)
                except StopAsyncIteration:
                    break
                _usage_add(usage, chunk.usage)
                for choice in chunk.choices:
                    delta = choice.delta
                    if delta is None:
                        continue
                    if delta.content:
                        round_text.append(delta.content)
                        text_parts.append(delta.content)
                        yielded = True
                        yield Chunk(content=delta.content)
                    for fragment in delta.tool_calls or ():
                        _merge_fragment(fragments, fragment)
        except (_BudgetSpent, openai.APIError, httpx.HTTPError) as exc:
            reason = "turn budget spent" if isinstance(exc, _BudgetSpent) else f"{type(exc).__name__}: {exc}"
            logger.warning("model request failed round={} reason={}", round_no + 1, reason)
            if not yielded:
                raise LlmUnavailable(reason) from exc
            yield Error(DOWNSTREAM, TURN_TIMEOUT_TEXT if isinstance(exc, _BudgetSpent) else MODEL_INTERRUPTED_TEXT)
            yield ended(interrupted=True)
            return
        finally:
            if stream is not None:
                await stream.close()

        calls = _finish_calls(fragments) if offered else []
        if not calls:
            break
        logger.info("round={} tool calls={}", round_no + 1, [c.name for c in calls])
        for call in calls:
            yielded = True
            yield ToolCall(call_id=call.id, tool=call.name, args=call.arguments)

        queue: asyncio.Queue = asyncio.Queue()
        tasks = [asyncio.create_task(_run_one(c, by_name.get(c.name), ctx, queue)) for c in calls]
        outcomes: dict[str, ToolOutcome] = {}
        try:
            while len(outcomes) < len(calls):
                item = await _within(queue.get(), deadline)
                if isinstance(item, ToolChunk):
                    yield item
                    continue
                call, outcome = item
                outcomes[call.id] = outcome
                yield ToolResult(call_id=call.id, tool=call.name, ok=outcome.ok, content=outcome.text,
                                 error=outcome.error, chart=outcome.chart)
                if outcome.code == CAMPUS_TOKEN_EXPIRED:
                    yield Error(CAMPUS_TOKEN_EXPIRED, outcome.error or outcome.text)
        except _BudgetSpent:
            yield Error(DOWNSTREAM, TURN_TIMEOUT_TEXT)
            yield ended(interrupted=True)
            return
        finally:
            for task in tasks:  # the client went away or the budget ran out: stop the tools
                if not task.done():
                    task.cancel()

        messages.append({"role": "assistant", "content": "".join(round_text) or None,
                         "tool_calls": [c.message() for c in calls]})
        for call in calls:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": outcomes[call.id].text})
            chart = outcomes[call.id].chart or chart
    yield ended(interrupted=False)
