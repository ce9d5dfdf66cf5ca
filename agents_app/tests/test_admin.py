"""Admin: "list tools" on MCP services and the tools an agent's model will be offered."""
import pytest
from django.urls import reverse

from agents_app.models import McpService
from campus_agent.testing.admin_forms import admin_action_run

pytestmark = pytest.mark.django_db


def run_list_tools(client, *services):
    return admin_action_run(client, changelist="admin:agents_app_mcpservice_changelist", action="list_tools",
                            objects=services)


def test_list_tools_reports_exposed_names_and_descriptions(staff_client, mcp_service_http):
    [(level, text)] = run_list_tools(staff_client, mcp_service_http)
    assert level == "success"
    assert "共 8 个工具" in text and "http-tools__add（把两个整数相加" in text and "http-tools__picture" in text


def test_list_tools_shows_the_connection_error(staff_client, unused_tcp_port):
    down = McpService.objects.create(
        name="down", protocol="sse", config={"url": f"http://127.0.0.1:{unused_tcp_port}/sse"}, timeout_sec=1
    )
    [(level, text)] = run_list_tools(staff_client, down)
    assert level == "error" and text.startswith("“down” 连接失败：")
    assert "Traceback" not in text


def test_agent_page_shows_the_tools_the_model_will_be_offered(staff_client, agent_factory, sub_agent,
                                                              mcp_service_stdio, unused_tcp_port):
    down = McpService.objects.create(
        name="down", protocol="streamable-http", config={"url": f"http://127.0.0.1:{unused_tcp_port}/mcp"},
        timeout_sec=1,
    )
    agent = agent_factory(sub_agents=[sub_agent], mcp_services=[mcp_service_stdio, down])
    page = staff_client.get(reverse("admin:agents_app_agent_change", args=[agent.pk])).content.decode()
    assert "模型将看到的工具" in page
    assert "<code>call_canteen</code> — 食堂助手" in page
    assert "<code>tools__add</code>" in page and "<code>tools__env_keys</code>" in page
    assert "连接失败 down:" in page
