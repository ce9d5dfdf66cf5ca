"""The enabled agents and their catalogs, kept by each worker while the database says they are current.

A turn needs its agent with the agent's enabled MCP services, sub-agents, provider and fallbacks.
Read per turn, that was four or five queries of every admission (issue 24's burst: 1,000 of them at
once). Now a turn reads one row, the `CatalogStamp`, and takes the agents from this worker's copy
when the stamp's token is the one the copy was read with; otherwise it reads them all again, once.

The token is changed by database triggers on every table the catalog is read from
(CATALOG_MODELS), so a write by any process, made in any way, makes every worker read the catalog
again at its next turn: a change in admin still applies to the next turn on every worker. The
triggers are (re)installed after every `migrate` (post_migrate, agents_app.apps): SQLite drops a
table's triggers when a migration rebuilds the table, which many `ALTER`s do.

A database other than SQLite and PostgreSQL has no triggers here: its turns read the catalog
every time, as before. The kept `Agent` instances are shared by the turns of the worker and must
be treated as read-only (nothing in a turn writes to its agent).
"""
import threading
from dataclasses import dataclass

from agents_app.models import Agent, AgentFallback, CatalogStamp, McpService, Provider
from agents_app.selectors import agent_list, catalog_prefetches
from campus_agent.base.stamps import stamp_token, stamp_triggers_install, stamps_kept
from knowledge_app.models import KnowledgeCollection
from subagents_app.models import SubAgent


def catalog_tables() -> list[str]:
    """The tables whose rows a turn's catalog is read from (the M2M tables included: the groups
    each item is limited to as well)."""
    models = [Agent, Agent.mcp_services.through, Agent.sub_agents.through, AgentFallback, Provider, McpService,
              SubAgent, Agent.allowed_groups.through, McpService.allowed_groups.through,
              SubAgent.allowed_groups.through, Agent.knowledge_collections.through, KnowledgeCollection,
              KnowledgeCollection.allowed_groups.through]
    return [model._meta.db_table for model in models]


@dataclass(frozen=True)
class CatalogSnapshot:
    token: str | None  # None: read for one turn and not kept
    agents: tuple[Agent, ...]  # agent_list's order: the default first
    by_id: dict[int, Agent]
    by_slug: dict[str, Agent]
    # Which of them a user may use, and which is their default, is agents_app.access's to say.


_kept: CatalogSnapshot | None = None
_reload = threading.Lock()


def catalog_snapshot() -> CatalogSnapshot:
    """The enabled agents with their catalogs as the database holds them now (sync): one query
    when this worker's copy is current, else the catalog read again and kept."""
    global _kept
    if not stamps_kept():
        return _catalog_read(token=None)
    token = _stamp_token()
    kept = _kept
    if kept is not None and kept.token == token:
        return kept
    with _reload:  # a burst right after a change reads the catalog once, not once per turn
        if _kept is None or _kept.token != token:
            # Read after the token: a write committed in between is read too (and kept under the
            # older token, which the next turn no longer sees, so it reads again); never older.
            _kept = _catalog_read(token=token)
        return _kept


def _stamp_token() -> str:
    return stamp_token(CatalogStamp)


def _catalog_read(*, token: str | None) -> CatalogSnapshot:
    agents = list(agent_list().select_related("provider").prefetch_related(*catalog_prefetches()))
    return CatalogSnapshot(
        token=token,
        agents=tuple(agents),
        by_id={agent.pk: agent for agent in agents},
        by_slug={agent.slug: agent for agent in agents},
    )


def catalog_triggers_install(*, using: str = "default") -> None:
    """Creates the triggers that change the stamp's token, where they are missing (idempotent)."""
    stamp_triggers_install(using=using, model=CatalogStamp, tables=catalog_tables(), function="catalog_stamp_touch",
                           sqlite_name="{table}_catalog_{event}", postgres_name="{table}_catalog_stamp")
