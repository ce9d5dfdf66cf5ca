"""Fixtures for the agent runtime: the scripted LLM, MCP test servers and catalog rows.

Registered in the root conftest.py. How to script them: docs/testing.md.
"""
import sys

import pytest
from django.conf import settings as django_settings

from agents_app.models import Agent, AgentFallback, McpService, Provider
from agents_app.testing.fake_llm import FakeLlm
from agents_app.testing.mcp_servers import SPAWN_LOG_ENV, HttpMcpServer


@pytest.fixture(scope="session")
def llm_server_session():
    """The scripted model's server, started once per test session (`llm_server` resets it)."""
    with FakeLlm() as server:
        yield server


@pytest.fixture
def llm_server(llm_server_session):
    """The scripted OpenAI-compatible server: `.url` (ends /v1), `.reply_text()`, `.requests` …
    The session's one, reset for this test: no script, responder or request of another test."""
    llm_server_session.reset()
    yield llm_server_session
    llm_server_session.requests_cancel()  # a stalled reply of this test answers no later test


@pytest.fixture
def llm_settings(settings, llm_server):
    """Points the LLM_* settings at `llm_server` (and returns it). Short timeout keeps fault tests fast."""
    settings.LLM_BASE_URL = llm_server.url
    settings.LLM_API_KEY = "sk-test-0123456789abcdef"
    settings.LLM_MODEL = "fake-model"
    settings.LLM_TIMEOUT = 5.0
    # One attempt per request, as before retries existed: a fault test sees its one failure at
    # once. The retry tests (agents_app/tests/test_providers.py) turn them on.
    settings.LLM_RETRIES = 0
    return llm_server


@pytest.fixture(scope="session")
def llm_server_second_session():
    """A second scripted model, for a second provider (started once, reset per test)."""
    with FakeLlm(model="backup-model") as server:
        yield server


@pytest.fixture
def llm_server_second(llm_server_second_session):
    """The second scripted model, reset for this test (a fallback provider's endpoint)."""
    llm_server_second_session.reset()
    yield llm_server_second_session
    llm_server_second_session.requests_cancel()


@pytest.fixture
def provider_factory(db):
    """`provider_factory(name=, base_url=, key=, **fields)` → a saved Provider (`key` stored encrypted)."""
    def make(*, name: str, base_url: str, key: str | None = None, **fields) -> Provider:
        provider = Provider(name=name, base_url=base_url, default_model=fields.pop("default_model", "fake-model"),
                            timeout_sec=fields.pop("timeout_sec", 5), **fields)
        provider.api_key_store(key)
        provider.full_clean()
        provider.save()
        return provider

    return make


@pytest.fixture
def agent_fallbacks_set(db):
    """`agent_fallbacks_set(agent, [provider, (provider, model), …])`: the agent's fallback list, in order."""
    def make(agent: Agent, providers: list) -> None:
        AgentFallback.objects.filter(agent=agent).delete()
        for position, item in enumerate(providers):
            provider, model = item if isinstance(item, tuple) else (item, "")
            AgentFallback.objects.create(agent=agent, provider=provider, position=position, model=model)

    return make


@pytest.fixture
def agent_factory(db):
    def make(**fields) -> Agent:
        mcp_services = fields.pop("mcp_services", [])
        sub_agents = fields.pop("sub_agents", [])
        values = {
            "slug": "xiaozhi",
            "name": "校园小智",
            "system_prompt": "你是校园小智，回答学生关于校园生活的问题。",
            "is_default": True,
        }
        values.update(fields)
        agent = Agent.objects.create(**values)
        agent.mcp_services.set(mcp_services)
        agent.sub_agents.set(sub_agents)
        return agent

    return make


@pytest.fixture
def agent(agent_factory, sub_agent) -> Agent:
    """The default agent `xiaozhi`, offered the `canteen` sub-agent (tool `call_canteen`)."""
    return agent_factory(sub_agents=[sub_agent])


@pytest.fixture
def mcp_spawn_log(tmp_path):
    """A file the stdio test server appends its pid to at each start (count lines = spawns)."""
    path = tmp_path / "mcp-spawns.log"
    path.touch()
    return path


@pytest.fixture
def mcp_service_stdio(db, mcp_spawn_log) -> McpService:
    """McpService `tools` over stdio running agents_app.testing.mcp_servers (tools `tools__add` …)."""
    return McpService.objects.create(
        name="tools",
        protocol="stdio",
        config={
            "command": sys.executable,
            "args": ["-m", "agents_app.testing.mcp_servers"],
            "env": {SPAWN_LOG_ENV: str(mcp_spawn_log)},
            "cwd": str(django_settings.BASE_DIR),
        },
        # Starting a Python with the mcp SDK takes 1–2 s on an idle 2-core machine and over 5 s on a
        # busy one: the tests are about the calls, not about a slow start.
        timeout_sec=15,
    )


@pytest.fixture
def mcp_sse_server():
    with HttpMcpServer("sse") as server:
        yield server


@pytest.fixture
def mcp_http_server():
    with HttpMcpServer("streamable-http") as server:
        yield server


def _http_service(name: str, server: HttpMcpServer) -> McpService:
    return McpService.objects.create(name=name, protocol=server.transport, config={"url": server.url}, timeout_sec=5)


@pytest.fixture
def mcp_service_sse(db, mcp_sse_server) -> McpService:
    return _http_service("sse-tools", mcp_sse_server)


@pytest.fixture
def mcp_service_http(db, mcp_http_server) -> McpService:
    return _http_service("http-tools", mcp_http_server)


@pytest.fixture(params=["mcp_service_stdio", "mcp_service_sse", "mcp_service_http"])
def any_mcp_service(request) -> McpService:
    """The same test MCP server over each transport in turn (stdio, SSE, streamable-http)."""
    return request.getfixturevalue(request.param)


@pytest.fixture
async def mcp_pool_cleanup():
    """Closes the MCP sessions this test's event loop opened (stdio servers exit)."""
    yield
    from agents_app.mcp.pool import mcp_pool_close

    await mcp_pool_close()
