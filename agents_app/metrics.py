"""Scrape-time gauges of the catalog (campus_agent.metrics): each MCP service's and sub-agent's
circuit breaker, read from the shared cache when /metrics is asked for (so every worker reports
the same state, once)."""
from campus_agent.circuit import CircuitState, circuit_status
from campus_agent.metrics import scrape_gauge

_STATE_VALUE = {CircuitState.CLOSED: 0, CircuitState.HALF_OPEN: 1, CircuitState.OPEN: 2}


def _breakers():
    from agents_app.mcp.tools import mcp_circuit_key
    from agents_app.models import McpService
    from subagents_app.client import subagent_circuit_key
    from subagents_app.models import SubAgent

    for service in McpService.objects.filter(enabled=True).only("id", "name", "created_at"):
        state = circuit_status(source=mcp_circuit_key(service)).state
        yield {"kind": "mcp", "name": service.name}, _STATE_VALUE[state]
    for sub_agent in SubAgent.objects.filter(enabled=True).only("id", "name", "created_at"):
        state = circuit_status(source=subagent_circuit_key(sub_agent)).state
        yield {"kind": "subagent", "name": sub_agent.name}, _STATE_VALUE[state]


def metrics_register() -> None:
    scrape_gauge("campus_agent_breaker_state", "Circuit breaker per source: 0 closed, 1 half-open, 2 open", _breakers)
