"""The tool loop of one chat turn (DESIGN §6)."""
from __future__ import annotations

import json
import time
import uuid
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
from agents_app.runtime.tool import tool_spec
from agents_app.runtime.tool_runs import ToolRequest, tool_calls_run
from agents_app.runtime.tools import tools_for_agent
from campus_agent.errors import DOWNSTREAM
from campus_agent.request_id import request_id_set
from campus_agent.text import text_clean

NOT_CONFIGURED_REASON = "LLM_BASE_URL is not set"
MODEL_INTERRUPTED_TEXT = "AI 模型回答中断，请稍后重试。"
TURN_TIMEOUT_TEXT = "本轮回答超时，请稍后重试或换个问法。"
DOMAIN_HINT_TEXT = "提示：学生是从“{domain}”业务入口进入本对话的，问题不明确时优先考虑该业务域的工具。"
MODEL_REFUSED_TEXT = "AI 模型拒绝了请求（HTTP {status}），请联系管理员检查模型配置。"
BAD_ARGUMENTS_NOTE = "注意：调用参数不是 JSON 对象，已按空参数 {} 调用。"


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


@dataclass
class _Call:
    """One tool call as the model streamed it, merged by index."""

    id: str = ""
    name: str = ""
    arguments: str = ""
    args: dict = field(default_factory=dict)
    args_ok: bool = True

    def finish(self) -> None:
        # The model's text goes back to the model (and to the tool): make it valid once, here.
        self.id, self.name, self.arguments = text_clean(self.id), text_clean(self.name), text_clean(self.arguments)
        try:
            parsed = json.loads(self.arguments) if self.arguments.strip() else {}
        except (ValueError, RecursionError):
            parsed = None
        if isinstance(parsed, dict):
            self.args = text_clean(parsed)
            if self.args != parsed:  # escapes ("\ud800", "\u0000") that decode to invalid text
                self.arguments = json.dumps(self.args, ensure_ascii=False)
        else:
            self.args, self.args_ok, self.arguments = {}, False, "{}"
        if not self.arguments.strip():
            self.arguments = "{}"

    def message(self) -> dict:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}

    def request(self) -> ToolRequest:
        return ToolRequest(call_id=self.id, tool=self.name, args=self.args,
                           note="" if self.args_ok else BAD_ARGUMENTS_NOTE)


def _usage_add(total: dict, usage) -> None:
    if not isinstance(usage, dict):
        return
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        value = usage.get(key)
        if isinstance(value, int):
            total[key] = total.get(key, 0) + value


def _merge_fragment(calls: dict[int, _Call], fragment: dict) -> None:
    """Merges one streamed `delta.tool_calls[]` fragment (a plain dict) into its call by index."""
    index = fragment.get("index")
    call = calls.setdefault(index if index is not None else len(calls), _Call())
    if fragment.get("id"):
        call.id = fragment["id"]
    function = fragment.get("function")
    if isinstance(function, dict):
        name, arguments = function.get("name"), function.get("arguments")
        if name and not call.name:
            call.name = name
        if arguments and isinstance(arguments, str):
            call.arguments += arguments


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
    deadline = turn_deadline(ctx)
    tools = await tools_for_agent(agent)
    by_name = {tool.name: tool for tool in tools}
    specs = [tool_spec(tool) for tool in tools]
    messages = [{"role": "system", "content": prompt}] if (prompt := _system_prompt(agent, ctx)) else []
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
            stream = await within(
                llm_stream(model=agent.effective_model, messages=messages, tools=offered,
                           temperature=agent.temperature, request_id=ctx.request_id),
                deadline,
            )
            chunks = stream.__aiter__()
            while True:
                try:
                    chunk = await within(chunks.__anext__(), deadline)
                except StopAsyncIteration:
                    break
                # Chunks are plain dicts (see LlmStream): any field may be missing or null.
                _usage_add(usage, chunk.get("usage"))
                for choice in chunk.get("choices") or ():
                    delta = choice.get("delta") if isinstance(choice, dict) else None
                    if not isinstance(delta, dict):
                        continue
                    content = delta.get("content")
                    if content and isinstance(content, str):
                        text = Chunk(content=content)  # the event makes the text valid
                        round_text.append(text.content)
                        text_parts.append(text.content)
                        yielded = True
                        yield text
                    for fragment in delta.get("tool_calls") or ():
                        if isinstance(fragment, dict):
                            _merge_fragment(fragments, fragment)
        except (BudgetSpent, openai.APIError, httpx.HTTPError) as exc:
            reason = "turn budget spent" if isinstance(exc, BudgetSpent) else f"{type(exc).__name__}: {exc}"
            logger.warning("model request failed round={} reason={}", round_no + 1, reason)
            if not _model_down(exc):
                logger.error("model refused the request: {} (check LLM_* settings and the agent's model)", reason)
                yield Error(DOWNSTREAM, MODEL_REFUSED_TEXT.format(status=exc.status_code))
                yield ended(interrupted=True)
                return
            if not yielded:
                raise LlmUnavailable(reason) from exc
            yield Error(DOWNSTREAM, TURN_TIMEOUT_TEXT if isinstance(exc, BudgetSpent) else MODEL_INTERRUPTED_TEXT)
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

        results: dict[str, ToolResult] = {}
        runs = tool_calls_run(calls=[c.request() for c in calls], tools_by_name=by_name, ctx=ctx, deadline=deadline)
        try:
            async with aclosing(runs):  # closing the turn closes the runs: their tools are cancelled
                async for event in runs:
                    if isinstance(event, ToolResult):
                        results[event.call_id] = event
                    yield event
        except BudgetSpent:
            yield Error(DOWNSTREAM, TURN_TIMEOUT_TEXT)
            yield ended(interrupted=True)
            return

        messages.append({"role": "assistant", "content": "".join(round_text) or None,
                         "tool_calls": [c.message() for c in calls]})
        for call in calls:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": results[call.id].content})
            chart = results[call.id].chart or chart
    yield ended(interrupted=False)
