"""Fixtures for the sub-agent side: the contract sub-agent server and SubAgent rows."""
import pytest

from subagents_app.models import SubAgent
from subagents_app.testing.contract_agent import ContractAgent


@pytest.fixture
def subagent_server():
    """A running contract sub-agent (see contract_agent.py for the `[[mode:…]]` markers)."""
    with ContractAgent(name="canteen") as server:
        yield server


@pytest.fixture
def canteen(db) -> SubAgent:
    """A `canteen` SubAgent row at a service-host URL nothing serves: for admin and import/export
    tests, which never call it (a test that calls a sub-agent uses `sub_agent`)."""
    return SubAgent.objects.create(
        name="canteen", description="食堂菜单。关键词：食堂、吃什么", base_url="http://canteen-agent:8000", domain="canteen"
    )


@pytest.fixture
def sub_agent_factory(db, subagent_server):
    """Make SubAgent rows pointing at the contract server: `sub_agent_factory(name="notice")`."""

    def make(**fields) -> SubAgent:
        values = {
            "name": "canteen",
            "description": "食堂助手：食堂、菜单、吃什么、饭菜、营业时间。",
            "base_url": subagent_server.url,
            "domain": "canteen",
            "timeout_sec": 3,
        }
        values.update(fields)
        return SubAgent.objects.create(**values)

    return make


@pytest.fixture
def sub_agent(sub_agent_factory) -> SubAgent:
    """The `canteen` sub-agent (tool `call_canteen`), timeout 3 s, served by `subagent_server`."""
    return sub_agent_factory()
