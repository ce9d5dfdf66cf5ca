"""Scrape-time gauges of the catalog (campus_agent.base.metrics): each MCP service's and sub-agent's
circuit breaker, read from the shared cache when /metrics is asked for (so every worker reports
the same state, once)."""
from agents_app.mcp.tools import mcp_circuit_key
from agents_app.models import McpService
from campus_agent.base.circuit import CircuitState, circuit_status
from campus_agent.base.metrics import scrape_gauge
from subagents_app.client import subagent_circuit_key
from subagents_app.models import SubAgent

_STATE_VALUE = {CircuitState.CLOSED: 0, CircuitState.HALF_OPEN: 1, CircuitState.OPEN: 2}


def breaker_states() -> list[dict]:
    """Every enabled MCP service's and sub-agent's breaker: {"kind", "name", "state"} (CircuitState)."""
    states = []
    for service in McpService.objects.filter(enabled=True).only("id", "name", "created_at"):
        states.append({"kind": "mcp", "name": service.name, "state": circuit_status(source=mcp_circuit_key(service)).state})
    for sub_agent in SubAgent.objects.filter(enabled=True).only("id", "name", "created_at"):
        states.append({"kind": "subagent", "name": sub_agent.name,
                       "state": circuit_status(source=subagent_circuit_key(sub_agent)).state})
    return states


def _breakers():
    for breaker in breaker_states():
        yield {"kind": breaker["kind"], "name": breaker["name"]}, _STATE_VALUE[breaker["state"]]


def metrics_register() -> None:
    scrape_gauge("campus_agent_breaker_state", "Circuit breaker per source: 0 closed, 1 half-open, 2 open", _breakers)
