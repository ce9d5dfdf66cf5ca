"""Fixtures for the sub-agent side: the contract sub-agent server and SubAgent rows."""
import pytest

from subagents_app.models import SubAgent
from subagents_app.testing.contract_agent import ContractAgent


@pytest.fixture
def subagent_server():
    """A running contract sub-agent (see contract_agent.py for the `[[mode:…]]` markers)."""
    server = ContractAgent(name="canteen").serve()
    try:
        yield server
    finally:
        server.stop()


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
