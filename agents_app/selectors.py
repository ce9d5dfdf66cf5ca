"""Reads of agents_app."""
from django.db.models import Prefetch, prefetch_related_objects

from agents_app.models import Agent, McpService
from subagents_app.models import SubAgent


def _catalog_prefetches() -> tuple[Prefetch, Prefetch]:
    return (
        Prefetch(
            "mcp_services",
            queryset=McpService.objects.filter(enabled=True).order_by("name"),
            to_attr="enabled_mcp_services",
        ),
        Prefetch(
            "sub_agents",
            queryset=SubAgent.objects.filter(enabled=True).order_by("name"),
            to_attr="enabled_sub_agents",
        ),
    )


def agent_catalog_load(*, agent: Agent) -> Agent:
    """Loads the agent's enabled MCP services and sub-agents onto it (`enabled_mcp_services`,
    `enabled_sub_agents`), so the turn's tool list needs no query of its own. The chat stream
    calls this in the same database call that admits the turn: the catalog is still read per turn."""
    prefetch_related_objects([agent], *_catalog_prefetches())
    return agent


def agent_catalog_loaded(*, agent: Agent) -> bool:
    return hasattr(agent, "enabled_mcp_services") and hasattr(agent, "enabled_sub_agents")


def agent_catalog(*, agent: Agent) -> tuple[list[McpService], list[SubAgent]]:
    """The agent's enabled MCP services and sub-agents, ordered by name (sync): the lists
    `agent_catalog_load` put on this instance for its turn, else read now (and not kept, so a
    reused instance never serves an old catalog)."""
    if agent_catalog_loaded(agent=agent):
        return agent.enabled_mcp_services, agent.enabled_sub_agents
    services, sub_agents = _catalog_prefetches()
    return list(services.queryset.filter(agents=agent)), list(sub_agents.queryset.filter(agents=agent))
