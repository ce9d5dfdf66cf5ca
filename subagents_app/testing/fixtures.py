"""Fixtures for the sub-agent side: the contract sub-agent server and SubAgent rows."""
import pytest

from subagents_app.models import SubAgent
from subagents_app.testing.a2a_agent import A2aTestAgent
from subagents_app.testing.contract_agent import ContractAgent


@pytest.fixture(scope="session")
def subagent_server_session():
    """The contract sub-agent's server, started once per test session (`subagent_server` resets it)."""
    with ContractAgent(name="canteen") as server:
        yield server


@pytest.fixture
def subagent_server(subagent_server_session):
    """A running contract sub-agent (see contract_agent.py for the `[[mode:…]]` markers): the
    session's one, reset for this test (requests, `stream_cut`, `default_mode`, pacing)."""
    subagent_server_session.reset()
    yield subagent_server_session
    subagent_server_session.requests_cancel()  # a `trickle` or `timeout` stream ends with its test


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


@pytest.fixture(scope="session")
def a2a_server_session():
    """The A2A test agent's server, started once per test session (`a2a_server` resets it)."""
    with A2aTestAgent() as server:
        yield server


@pytest.fixture
def a2a_server(a2a_server_session):
    """A running A2A test agent (a2a_agent.py: variants by base URL, `[[mode:…]]` markers): the
    session's one, reset for this test (requests, messages, `cancelled` …)."""
    a2a_server_session.reset()
    yield a2a_server_session
    a2a_server_session.requests_cancel()


@pytest.fixture
def a2a_sub_agent_factory(db, a2a_server):
    """A2A SubAgent rows on the test agent: `a2a_sub_agent_factory("plain", name="library")`."""
    from subagents_app.a2a_card import agent_card_cache_clear

    agent_card_cache_clear()  # no card another test read (or failed to read)

    def make(variant: str = "stream", **fields) -> SubAgent:
        values = {
            "name": "library",
            "description": "图书馆助手：开放时间、借阅。关键词：图书馆、几点开门",
            "base_url": a2a_server.url(variant),
            "protocol": SubAgent.Protocol.A2A,
            "timeout_sec": 3,
        }
        values.update(fields)
        return SubAgent.objects.create(**values)

    yield make
    agent_card_cache_clear()
