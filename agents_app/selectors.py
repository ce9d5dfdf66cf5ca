"""Reads of agents_app: every read of `Agent` and of its catalog (enabled MCP services and
sub-agents) is here; chat_app and the runtime ask through these functions."""
from django.db.models import Prefetch, QuerySet, prefetch_related_objects

from agents_app.models import Agent, AgentFallback, McpService
from knowledge_app.models import KnowledgeCollection
from subagents_app.models import SubAgent


def agent_list() -> QuerySet[Agent]:
    """The enabled agents, the default first (the worker's catalog, agents_app.catalog_cache; which of
    them a user may use is agents_app.access's to say)."""
    return Agent.objects.filter(enabled=True).order_by("-is_default", "name")


def agent_default_exists() -> bool:
    """Whether an agent is marked default (enabled or not): staff's choice to keep."""
    return Agent.objects.filter(is_default=True).exists()


def _enabled_tools_prefetches() -> tuple[Prefetch, Prefetch, Prefetch]:
    return (
        Prefetch(
            "knowledge_collections",
            queryset=KnowledgeCollection.objects.filter(enabled=True).order_by("slug").prefetch_related("allowed_groups"),
            to_attr="enabled_knowledge_collections",
        ),
        Prefetch(
            "mcp_services",
            queryset=McpService.objects.filter(enabled=True).order_by("name").prefetch_related("allowed_groups"),
            to_attr="enabled_mcp_services",
        ),
        Prefetch(
            "sub_agents",
            queryset=SubAgent.objects.filter(enabled=True).order_by("name").prefetch_related("allowed_groups"),
            to_attr="enabled_sub_agents",
        ),
    )


def catalog_prefetches() -> tuple[Prefetch, ...]:
    """What a turn reads of its agent beside the row: its enabled MCP services, sub-agents and
    knowledge collections (`enabled_mcp_services`, `enabled_sub_agents`,
    `enabled_knowledge_collections`, so the turn's tool list needs no query of its
    own), the groups each of these and the agent is limited to (`allowed_groups`, read by
    agents_app.access) and its fallback providers in order (`fallback_links`, for
    runtime.providers.provider_chain). The provider itself is joined (`select_related`) or
    prefetched beside them."""
    return (
        *_enabled_tools_prefetches(),
        "allowed_groups",
        Prefetch("fallbacks", queryset=AgentFallback.objects.select_related("provider").order_by("position", "id"),
                 to_attr="fallback_links"),
    )


def agent_catalog_load(*, agent: Agent) -> Agent:
    """Loads the catalog (catalog_prefetches) and the provider onto this instance, read now. A
    chat turn takes its agent from agents_app.catalog_cache instead, which reads this once per
    change of the catalog; this is for an instance that is not the stored one (a copy with
    unsaved edits: the routing check's preview)."""
    prefetch_related_objects([agent], "provider", *catalog_prefetches())
    return agent


def agent_catalog_loaded(*, agent: Agent) -> bool:
    return hasattr(agent, "enabled_mcp_services") and hasattr(agent, "enabled_sub_agents")


def agent_catalog(*, agent: Agent) -> tuple[list[McpService], list[SubAgent]]:
    """The agent's enabled MCP services and sub-agents, ordered by name (sync): the lists
    `agent_catalog_load` put on this instance for its turn, else read now (and not kept, so a
    reused instance never serves an old catalog)."""
    if agent_catalog_loaded(agent=agent):
        return agent.enabled_mcp_services, agent.enabled_sub_agents
    _, services, sub_agents = _enabled_tools_prefetches()
    return list(services.queryset.filter(agents=agent)), list(sub_agents.queryset.filter(agents=agent))


def agent_collections(*, agent: Agent) -> list[KnowledgeCollection]:
    """The agent's enabled knowledge collections, ordered by slug (sync), as agent_catalog reads."""
    if hasattr(agent, "enabled_knowledge_collections"):
        return agent.enabled_knowledge_collections
    collections, _, _ = _enabled_tools_prefetches()
    return list(collections.queryset.filter(agents=agent))
