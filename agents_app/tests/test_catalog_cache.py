"""Issue 24: a worker keeps the agents' catalog while the database's stamp says it is current
(agents_app.catalog_cache), and every write to a catalog table, however it is made, makes the
next turn read it again."""
import threading

import pytest
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.db import connection, connections

from agents_app.access import EVERYONE, agent_of_conversation, tools_for
from agents_app.catalog_cache import catalog_snapshot, catalog_tables, catalog_triggers_install
from agents_app.models import Agent, AgentFallback, CatalogStamp, McpService, Provider
from subagents_app.models import SubAgent

pytestmark = pytest.mark.embedded


def _canteen(snapshot):
    return snapshot.by_slug["xiaozhi"]


def test_the_catalog_is_read_once_then_one_query_per_turn(agent, django_assert_num_queries):
    first = catalog_snapshot()
    assert [sub.name for sub in _canteen(first).enabled_sub_agents] == ["canteen"]
    with django_assert_num_queries(1):  # the stamp
        again = catalog_snapshot()
        assert again is first
        kept = _canteen(again)
        assert (kept.enabled_mcp_services, kept.fallback_links, kept.provider) == ([], [], None)


def _rename_agent(agent, **_):
    agent.name = "新名字"
    agent.save()
    return lambda snap: _canteen(snap).name == "新名字"


def _disable_sub_agent_by_update(agent, sub_agent, **_):
    SubAgent.objects.filter(pk=sub_agent.pk).update(enabled=False)
    return lambda snap: _canteen(snap).enabled_sub_agents == []


def _add_mcp_service(agent, **_):
    service = McpService.objects.create(name="tools", protocol="sse", config={"url": "http://127.0.0.1:9/sse"})
    agent.mcp_services.add(service)
    return lambda snap: [s.name for s in _canteen(snap).enabled_mcp_services] == ["tools"]


def _remove_sub_agent(agent, sub_agent, **_):
    agent.sub_agents.remove(sub_agent)
    return lambda snap: _canteen(snap).enabled_sub_agents == []


def _provider_by_sql(agent, provider_factory, **_):
    provider = provider_factory(name="主", base_url="http://127.0.0.1:9/v1", key="sk-x", default_model="m1")
    Agent.objects.filter(pk=agent.pk).update(provider=provider)
    with connection.cursor() as cursor:  # what a console does: no Django signal is sent
        cursor.execute(f'UPDATE "{Provider._meta.db_table}" SET default_model = %s', ["m2"])
    return lambda snap: _canteen(snap).provider.default_model == "m2"


def _add_fallback(agent, provider_factory, **_):
    backup = provider_factory(name="备用", base_url="http://127.0.0.1:9/v1", key="sk-y")
    AgentFallback.objects.create(agent=agent, provider=backup, position=1)
    return lambda snap: [link.provider.name for link in _canteen(snap).fallback_links] == ["备用"]


def _disable_agent(agent, agent_factory, **_):
    agent_factory(slug="jiaowu", name="教务", is_default=False)
    Agent.objects.filter(pk=agent.pk).update(enabled=False)
    return lambda snap: "xiaozhi" not in snap.by_slug and [a.slug for a in snap.agents] == ["jiaowu"] \
        and agent_of_conversation(audience=EVERYONE, agent_id=agent.pk, catalog=snap).slug == "jiaowu"


def _limit_sub_agent_to_a_group(agent, sub_agent, **_):
    # Who sees what (agents_app.access) is read from the kept catalog: a group given in admin
    # applies to the next turn on every worker as any other change does.
    sub_agent.allowed_groups.add(Group.objects.create(name="研究生"))
    return lambda snap: tools_for(agent=_canteen(snap), audience=EVERYONE) == ([], [])


@pytest.mark.parametrize("change", [_rename_agent, _disable_sub_agent_by_update, _add_mcp_service, _remove_sub_agent,
                                    _provider_by_sql, _add_fallback, _disable_agent,
                                    _limit_sub_agent_to_a_group])
def test_every_write_to_the_catalog_applies_to_the_next_turn(change, agent, sub_agent, agent_factory,
                                                              provider_factory):
    before = catalog_snapshot()
    token = CatalogStamp.objects.get().token
    current = change(agent=agent, sub_agent=sub_agent, agent_factory=agent_factory,
                     provider_factory=provider_factory)
    assert CatalogStamp.objects.get().token != token
    after = catalog_snapshot()
    assert after is not before and current(after)
    assert catalog_snapshot() is after


def _in_another_thread(work) -> None:
    """`work` on a connection of its own, committed before this returns (another worker's write)."""
    def run():
        try:
            work()
        finally:
            connections.close_all()
    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive()


@pytest.mark.django_db(transaction=True)
def test_a_write_on_another_connection_applies_to_this_workers_next_turn(agent, sub_agent):
    assert _canteen(catalog_snapshot()).enabled_sub_agents != []
    _in_another_thread(lambda: SubAgent.objects.filter(pk=sub_agent.pk).update(enabled=False))
    assert _canteen(catalog_snapshot()).enabled_sub_agents == []


def _triggers_drop() -> None:
    with connection.cursor() as cursor:
        for table in catalog_tables():
            if connection.vendor == "sqlite":
                for event in ("insert", "update", "delete"):
                    cursor.execute(f'DROP TRIGGER IF EXISTS "{table}_catalog_{event}"')
            else:
                cursor.execute(f'DROP TRIGGER IF EXISTS "{table}_catalog_stamp" ON "{table}"')


def test_migrate_puts_back_triggers_a_rebuilt_table_lost(agent, sub_agent):
    catalog_snapshot()
    _triggers_drop()  # what SQLite does to a table's triggers when a migration rebuilds the table
    token = CatalogStamp.objects.get().token
    SubAgent.objects.filter(pk=sub_agent.pk).update(enabled=False)
    assert CatalogStamp.objects.get().token == token  # without them, nothing would tell the workers

    call_command("migrate", verbosity=0)
    catalog_triggers_install()  # and installing twice changes nothing
    SubAgent.objects.filter(pk=sub_agent.pk).update(enabled=True)
    assert CatalogStamp.objects.get().token != token
    assert [sub.name for sub in _canteen(catalog_snapshot()).enabled_sub_agents] == ["canteen"]
