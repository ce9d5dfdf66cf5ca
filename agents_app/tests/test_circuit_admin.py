"""The breaker's state in admin: a column on the sub-agent and MCP service lists (read from the
cache, no connection), and the health check / list tools closing it when the source answers."""
import pytest
from django.urls import reverse

from agents_app.mcp.tools import mcp_circuit_key
from campus_agent.base.circuit import CircuitState, circuit_enter, circuit_failure, circuit_status
from subagents_app.admin import CIRCUIT_CLOSED_TEXT
from subagents_app.client import subagent_circuit_key
from testkit.web.admin_forms import admin_action_run

pytestmark = pytest.mark.django_db


def _open(key: str) -> None:
    for _ in range(3):
        circuit_failure(circuit_enter(source=key, name="test", lease_sec=10), reason="子 Agent 返回错误（500）")


def test_sub_agent_list_shows_the_state_and_the_health_check_closes_it(staff_client, sub_agent):
    changelist = reverse("admin:subagents_app_subagent_changelist")
    page = staff_client.get(changelist).content.decode()
    assert "熔断状态" in page and "正常" in page
    _open(subagent_circuit_key(sub_agent))
    page = staff_client.get(changelist).content.decode()
    assert "熔断中，自 " in page and "最近失败 " in page and "子 Agent 返回错误（500）" in page

    messages = admin_action_run(staff_client, changelist="admin:subagents_app_subagent_changelist",
                                action="health_check", objects=[sub_agent])
    assert messages[0][0] == "success"
    assert messages[1] == ("info", CIRCUIT_CLOSED_TEXT.format(name="canteen"))
    assert circuit_status(source=subagent_circuit_key(sub_agent)).state is CircuitState.CLOSED


def test_a_failing_health_check_leaves_it_open(staff_client, sub_agent_factory, unused_tcp_port):
    down = sub_agent_factory(name="down", base_url=f"http://127.0.0.1:{unused_tcp_port}")
    _open(subagent_circuit_key(down))
    [(level, _)] = admin_action_run(staff_client, changelist="admin:subagents_app_subagent_changelist",
                                    action="health_check", objects=[down])
    assert level == "error"
    assert circuit_status(source=subagent_circuit_key(down)).state is CircuitState.OPEN


def test_mcp_service_list_shows_the_state_and_list_tools_closes_it(staff_client, mcp_service_http, settings):
    changelist = reverse("admin:agents_app_mcpservice_changelist")
    _open(mcp_circuit_key(mcp_service_http))
    settings.CIRCUIT_COOLDOWN_SEC = 0
    assert "半开（等待试探）" in staff_client.get(changelist).content.decode()
    messages = admin_action_run(staff_client, changelist="admin:agents_app_mcpservice_changelist",
                                action="list_tools", objects=[mcp_service_http])
    assert [level for level, _ in messages] == ["success", "info"]
    assert circuit_status(source=mcp_circuit_key(mcp_service_http)).state is CircuitState.CLOSED
    assert "半开" not in staff_client.get(changelist).content.decode()


def test_trusted_is_superuser_only(editor_client, mcp_service_http):
    page = editor_client.get(reverse("admin:agents_app_mcpservice_change", args=[mcp_service_http.pk]))
    assert page.status_code == 200
    assert 'name="trusted"' not in page.content.decode()  # shown read-only, not a form field
    assert "可信服务" in page.content.decode()
