"""Who sees what (docs/design.md#campus-identity-and-audit): the one selector every gateway asks.

An agent, an MCP service, a sub-agent and a knowledge collection may each be limited to Django groups (`allowed_groups`;
none = everyone). What a user may not use is treated as though it did not exist: not listed (the
page, /api/v1/agents, /v1/models, the MCP server's ask_* tools, the A2A card's skills), not given
to the model as a tool, and named directly it gets the answer an unknown name gets.

    audience = audience_of(user=request.user)     # one query: the user's group ids
    agents_for(audience=audience)                 # the agents the user may use, the default first
    agent_for(audience=audience, slug="grad")     # None when unknown, disabled or not theirs
    tools_for(agent=agent, audience=audience)     # its MCP services and sub-agents the user may use
    collections_for(agent=agent, audience=audience)   # its knowledge collections the user may read

Everything is read from the worker's catalog (agents_app.catalog_cache), whose agents carry their
items' `allowed_groups` prefetched: filtering for a user costs no query beyond their group ids,
read once per request or turn and carried (the runtime's RunContext.audience).
"""
from dataclasses import dataclass

from asgiref.sync import sync_to_async
from django.contrib.auth.models import Group

from agents_app.catalog_cache import CatalogSnapshot, catalog_snapshot
from agents_app.models import Agent, McpService
from agents_app.selectors import agent_catalog, agent_collections
from knowledge_app.models import KnowledgeCollection
from subagents_app.models import SubAgent


@dataclass(frozen=True, slots=True)
class Audience:
    """Whom a listing or a turn is for: the groups of its user, or staff's whole view."""

    group_ids: frozenset[int] = frozenset()
    everything: bool = False  # a superuser, or staff's own checks (admin's tool list, the routing check)

    def may_use(self, item: Agent | McpService | SubAgent | KnowledgeCollection) -> bool:
        if self.everything:
            return True
        allowed = {group.pk for group in item.allowed_groups.all()}  # prefetched with the catalog
        return not allowed or not allowed.isdisjoint(self.group_ids)


EVERYONE = Audience()  # a caller in no group (and the public A2A card): only what is open to all
STAFF_VIEW = Audience(everything=True)


def audience_of_groups(*, group_ids: frozenset[int], superuser: bool) -> Audience:
    """A superuser sees everything (as Django's permissions let it); anyone else what their groups allow."""
    return STAFF_VIEW if superuser else Audience(group_ids=group_ids)


def audience_of(*, user) -> Audience:
    """The audience of a signed-in user (audience_of_groups): one query, their group ids."""
    if user is None or not getattr(user, "is_authenticated", False):
        return EVERYONE
    if user.is_superuser:
        return STAFF_VIEW
    return audience_of_groups(group_ids=frozenset(Group.objects.filter(user=user).values_list("id", flat=True)),
                              superuser=False)


async def aaudience_of(*, user) -> Audience:
    """See audience_of()."""
    return await sync_to_async(audience_of)(user=user)


def agents_for(*, audience: Audience, catalog: CatalogSnapshot | None = None) -> list[Agent]:
    """The enabled agents the audience may use, the default first (agent_list's order)."""
    catalog = catalog or catalog_snapshot()
    return [agent for agent in catalog.agents if audience.may_use(agent)]


def agent_for(*, audience: Audience, slug: str, catalog: CatalogSnapshot | None = None) -> Agent | None:
    """The enabled agent `slug` if the audience may use it; None as for one that does not exist."""
    agent = (catalog or catalog_snapshot()).by_slug.get(slug)
    return agent if agent is not None and audience.may_use(agent) else None


def agent_of_conversation(*, audience: Audience, agent_id: int | None,
                          catalog: CatalogSnapshot | None = None) -> Agent | None:
    """The agent a conversation goes on with: its own while enabled and the audience may use it,
    else the audience's default (the first they may use) — as a disabled agent's conversation goes
    on with the default. None when the audience may use no agent."""
    catalog = catalog or catalog_snapshot()
    agent = catalog.by_id.get(agent_id) if agent_id is not None else None
    if agent is not None and audience.may_use(agent):
        return agent
    return next(iter(agents_for(audience=audience, catalog=catalog)), None)


def collections_for(*, agent: Agent, audience: Audience) -> list[KnowledgeCollection]:
    """The agent's enabled knowledge collections the audience may read (each one tool)."""
    return [c for c in agent_collections(agent=agent) if audience.may_use(c)]


def tools_for(*, agent: Agent, audience: Audience) -> tuple[list[McpService], list[SubAgent]]:
    """The agent's enabled MCP services and sub-agents the audience may use, ordered by name (sync)."""
    services, sub_agents = agent_catalog(agent=agent)
    return ([s for s in services if audience.may_use(s)], [s for s in sub_agents if audience.may_use(s)])
