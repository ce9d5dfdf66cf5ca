"""The one tool interface the loop knows, and the tools an agent is offered this turn.

Public API (the keyword fallback of issue #6 uses it too):

    tools = await tools_for_agent(agent)          # list[Tool], read from the catalog now
    outcome = await tool.run(args, ctx, emit)     # ToolOutcome; `emit(text)` streams progress

A tool never raises for a failure the model should read (timeout, HTTP error, isError): it
returns `ToolOutcome(ok=False, text=…)`. If one raises anyway, the loop turns it into a result.
"""
from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from asgiref.sync import sync_to_async
from loguru import logger

from agents_app.models import Agent
from agents_app.runtime.context import RunContext
from agents_app.selectors import agent_catalog, agent_catalog_loaded

Emit = Callable[[str], Awaitable[None]]
"""Streams a piece of progress text (a sub-agent's own answer) to the user while a tool runs."""

NAME_LIMIT = 64
EMPTY_PARAMETERS = {"type": "object", "properties": {}}


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """What a tool run produced.

    `text` goes to the model as the tool message; `error` is the user-facing failure text
    (sent in the `tool_result` frame); `chart` is chart data a sub-agent returned; `code` is the
    contract error code of a failure (40102 / 50001 / 50003); the loop surfaces 40102 to the
    user as an `error` event, the others only as the failed tool result.
    """

    text: str
    ok: bool = True
    error: str | None = None
    chart: dict | None = None
    code: int | None = None


class Tool(Protocol):
    name: str  # unique within one turn, `[a-z0-9_-]{1,64}`
    description: str
    parameters: dict  # JSON Schema of an object

    async def run(self, args: dict, ctx: RunContext, emit: Emit) -> ToolOutcome: ...


def tool_spec(tool: Tool) -> dict:
    """The OpenAI `tools` entry of a tool."""
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
    }


def tool_name_normalise(raw: str) -> str:
    """Lower-case, `[a-z0-9_-]` only, at most 64 characters (a hash keeps long names apart)."""
    name = re.sub(r"[^a-z0-9_-]", "_", raw.lower()) or "tool"
    if len(name) > NAME_LIMIT:
        digest = hashlib.sha1(name.encode()).hexdigest()[:8]
        name = f"{name[: NAME_LIMIT - 9]}_{digest}"
    return name


def tool_name_unique(name: str, taken: set[str]) -> str:
    """`name`, or `name_2`, `name_3` … (still ≤ 64) when another tool of the turn has it."""
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        suffix = f"_{n}"
        candidate = name[: NAME_LIMIT - len(suffix)] + suffix
    taken.add(candidate)
    return candidate


def parameters_normalise(schema) -> dict:
    """An MCP `inputSchema` when it is an object schema, else an empty object schema."""
    if isinstance(schema, dict) and schema.get("type") == "object":
        normalised = dict(schema)
        normalised.setdefault("properties", {})
        return normalised
    return dict(EMPTY_PARAMETERS)


async def tools_for_agent(agent: Agent, *, pooled: bool = True, problems: list[str] | None = None) -> list[Tool]:
    """The tools the model is offered this turn, read from the catalog now (no restart needed).

    MCP tool lists come from a per-process cache that a save in admin drops; a service that
    cannot be reached is left out of this turn (and logged), the others still work. With
    `pooled=False` uncached lists are fetched over a one-off session (admin pages, which may
    run in a short-lived event loop). `problems`, when given, receives one line per service
    left out (for the admin page).
    """
    from agents_app.mcp.tools import mcp_tools_for_service
    from agents_app.runtime.subagent_tool import SubAgentTool

    if agent_catalog_loaded(agent=agent):  # read by the caller in this turn's admission
        services, sub_agents = agent_catalog(agent=agent)
    else:
        services, sub_agents = await sync_to_async(agent_catalog)(agent=agent)
    listed = await asyncio.gather(
        *(mcp_tools_for_service(service=s, pooled=pooled) for s in services), return_exceptions=True
    )
    taken: set[str] = set()
    tools: list[Tool] = []
    for service, result in zip(services, listed, strict=True):
        if isinstance(result, BaseException):
            logger.warning("MCP service {} left out of this turn: {}", service.name, result)
            if problems is not None:
                problems.append(f"{service.name}: {result}")
            continue
        for entry in result:
            entry.name = tool_name_unique(entry.name, taken)
            tools.append(entry)
    for sub_agent in sub_agents:
        # `call_` + a 63-character name is 68 characters: over the model API's 64 limit.
        name = tool_name_unique(tool_name_normalise(sub_agent.tool_name), taken)
        tools.append(SubAgentTool(sub_agent=sub_agent, name=name))
    return tools
