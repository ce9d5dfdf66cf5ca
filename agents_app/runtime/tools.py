"""The tools an agent is offered this turn, read from the catalog now (no restart needed).

    tools = await tools_for_agent(agent, audience=ctx.audience)   # list[Tool] (tool.py), names unique

The interface is tool.py, the naming rules tool_names.py, the two kinds of tool mcp_tool.py and
subagent_tool.py. The keyword fallback (fallback.py) offers the same list.
"""
from __future__ import annotations

import asyncio

from asgiref.sync import sync_to_async
from loguru import logger

from agents_app.access import Audience, collections_for, tools_for
from agents_app.mcp.oauth import oauth_required
from agents_app.mcp.pool import McpUnavailable
from agents_app.mcp.tools import mcp_circuit_key, mcp_service_tool_infos
from agents_app.models import Agent
from agents_app.runtime.knowledge_tool import KnowledgeTool
from agents_app.runtime.mcp_tool import CONNECT_TOOL, McpConnectTool, McpTool
from agents_app.runtime.subagent_tool import SubAgentTool
from agents_app.runtime.tool import Tool
from agents_app.runtime.tool_names import knowledge_tool_name, mcp_tool_name, subagent_tool_name, tool_name_unique
from agents_app.selectors import agent_catalog_loaded
from campus_agent.base.approval import ApprovalPolicy
from campus_agent.base.circuit import acircuit_open_sources
from subagents_app.client import subagent_circuit_key


async def tools_for_agent(agent: Agent, *, audience: Audience, pooled: bool = True, problems: list[str] | None = None,
                          user_id: int | None = None) -> list[Tool]:
    """The agent's enabled MCP services' tools, then its enabled sub-agents, then its knowledge
    collections (`search_<slug>`) — those `audience` may use (agents_app.access: a service or sub-agent limited to other groups is never offered to the
    model) — each named per docs/design.md#the-tool-loop and unique within the turn (a later
    collision gets `_2`, `_3` …).

    MCP tool lists come from a per-process cache that a save in admin drops; a service that
    cannot be reached is left out of this turn (and logged), the others still work. With
    `pooled=False` uncached lists are fetched over a one-off session (admin pages, which may
    run in a short-lived event loop). `problems`, when given, receives one line per service
    left out (for the admin page). A source whose circuit breaker is open is still offered, its
    description saying it is unavailable (campus_agent/base/circuit.py). `user_id`: the student, whose
    session lists a per-student service's tools when no list is cached (agents_app/mcp/oauth.py).
    """
    if agent_catalog_loaded(agent=agent):  # read by the caller in this turn's admission
        (services, sub_agents), collections = tools_for(agent=agent, audience=audience), collections_for(
            agent=agent, audience=audience)
    else:
        (services, sub_agents), collections = await sync_to_async(_tools_and_collections)(agent=agent,
                                                                                          audience=audience)
    listed = await asyncio.gather(
        *(mcp_service_tool_infos(service=s, pooled=pooled, user_id=user_id) for s in services), return_exceptions=True
    )
    down = await acircuit_open_sources(
        sources=[mcp_circuit_key(s) for s in services] + [subagent_circuit_key(s) for s in sub_agents]
    )
    taken: set[str] = set()
    tools: list[Tool] = []
    for service, infos in zip(services, listed, strict=True):
        if isinstance(infos, McpUnavailable) and (infos.authorization_url or infos.oauth_refused and
                                                  oauth_required(service)):
            # A per-student service this student has not authorized: its tools cannot be listed
            # without their session, so the model is offered the way to connect it instead (whose
            # call tells the student when the service's authorization is set up wrongly).
            tools.append(McpConnectTool(service=service, name=tool_name_unique(
                mcp_tool_name(service=service.name, tool=CONNECT_TOOL), taken)))
            continue
        if isinstance(infos, BaseException):
            logger.warning("MCP service {} left out of this turn: {}", service.name, infos)
            if problems is not None:
                problems.append(f"{service.name}: {infos}")
            continue
        for info in infos:
            if service.tool_approval(tool=info.name, read_only=info.read_only,
                                     destructive=info.destructive) == ApprovalPolicy.NEVER:
                continue  # staff turned it off: the model is not offered it
            name = tool_name_unique(mcp_tool_name(service=service.name, tool=info.name), taken)
            tools.append(McpTool(service=service, info=info, name=name, unavailable=mcp_circuit_key(service) in down))
    for sub_agent in sub_agents:
        if sub_agent.approval_policy == ApprovalPolicy.NEVER:
            continue
        name = tool_name_unique(subagent_tool_name(sub_agent=sub_agent.name), taken)
        tools.append(SubAgentTool(sub_agent=sub_agent, name=name, unavailable=subagent_circuit_key(sub_agent) in down))
    for collection in collections:
        tools.append(KnowledgeTool(collection=collection,
                                   name=tool_name_unique(knowledge_tool_name(slug=collection.slug), taken)))
    return tools


def _tools_and_collections(*, agent: Agent, audience: Audience):
    return tools_for(agent=agent, audience=audience), collections_for(agent=agent, audience=audience)
