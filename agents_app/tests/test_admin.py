"""Admin: "list tools" on MCP services and the tools an agent's model will be offered.

Listing connects to the services (a stdio one is a process the server starts), so it happens
only on an explicit POST, never by opening a page."""
import pytest
from django.contrib.messages import get_messages
from django.urls import reverse
from django.utils.html import escape

from agents_app.admin import OFFERED_TOOLS_HINT, OFFERED_TOOLS_PROBLEM
from agents_app.models import McpService
from testkit.web.admin_forms import admin_action_run

pytestmark = pytest.mark.django_db


def run_list_tools(client, *services):
    return admin_action_run(client, changelist="admin:agents_app_mcpservice_changelist", action="list_tools",
                            objects=services)


def test_list_tools_reports_exposed_names_and_descriptions(staff_client, mcp_service_http):
    [(level, text)] = run_list_tools(staff_client, mcp_service_http)
    assert level == "success"
    assert "共 22 个工具" in text and "http-tools__add（把两个整数相加" in text and "http-tools__picture" in text
    assert "审批：直接运行" in text  # the service is untrusted: register_course's destructiveHint decides nothing


def test_list_tools_shows_each_tools_approval_policy(staff_client, mcp_service_http):
    """A trusted service's annotations set the defaults; a per-tool setting wins over them."""
    mcp_service_http.trusted = True
    mcp_service_http.tool_approvals = {"add": "ask"}
    mcp_service_http.save()
    [(_, text)] = run_list_tools(staff_client, mcp_service_http)
    assert "http-tools__register_course（为学生选一门课（会改变选课结果）。；审批：先经学生确认）" in text
    assert "http-tools__timetable（查询今天的课表。；审批：直接运行）" in text
    assert "http-tools__add（把两个整数相加。Add two integers.；审批：先经学生确认）" in text


def test_list_tools_shows_the_connection_error(staff_client, unused_tcp_port):
    down = McpService.objects.create(
        name="down", protocol="sse", config={"url": f"http://127.0.0.1:{unused_tcp_port}/sse"}, timeout_sec=1
    )
    [(level, text)] = run_list_tools(staff_client, down)
    assert level == "error" and text.startswith("“down” 连接失败：")
    assert "Traceback" not in text


def _agent_with_tools(agent_factory, sub_agent, mcp_service_stdio, unused_tcp_port):
    down = McpService.objects.create(
        name="down", protocol="streamable-http", config={"url": f"http://127.0.0.1:{unused_tcp_port}/mcp"},
        timeout_sec=1,
    )
    return agent_factory(sub_agents=[sub_agent], mcp_services=[mcp_service_stdio, down])


def test_opening_the_agent_page_runs_no_mcp_server(staff_client, agent_factory, sub_agent, mcp_service_stdio,
                                                   mcp_spawn_log, unused_tcp_port):
    agent = _agent_with_tools(agent_factory, sub_agent, mcp_service_stdio, unused_tcp_port)
    page = staff_client.get(reverse("admin:agents_app_agent_change", args=[agent.pk]))
    assert page.status_code == 200
    assert mcp_spawn_log.read_text() == ""  # no stdio server was started
    assert escape(OFFERED_TOOLS_HINT) in page.content.decode()
    opened = staff_client.get(reverse("admin:agents_app_agent_tools", args=[agent.pk]))
    assert (opened.status_code, opened.url) == (302, reverse("admin:agents_app_agent_change", args=[agent.pk]))
    assert mcp_spawn_log.read_text() == ""


def test_list_tools_button_shows_the_tools_the_model_will_be_offered(staff_client, agent_factory, sub_agent,
                                                                     mcp_service_stdio, mcp_spawn_log,
                                                                     unused_tcp_port):
    agent = _agent_with_tools(agent_factory, sub_agent, mcp_service_stdio, unused_tcp_port)
    change = reverse("admin:agents_app_agent_change", args=[agent.pk])
    button = reverse("admin:agents_app_agent_tools", args=[agent.pk])
    assert f'action="{button}"' in staff_client.get(change).content.decode()

    response = staff_client.post(button)

    assert response.status_code == 302 and response["Location"] == change
    [(level, text), (problem_level, problem)] = [(m.level_tag, m.message) for m in get_messages(response.wsgi_request)]
    assert level == "success" and text.startswith("“校园小智”的模型将看到 23 个工具：")
    assert "call_canteen（食堂助手" in text and "tools__add（把两个整数相加" in text
    assert problem_level == "error" and problem.startswith(OFFERED_TOOLS_PROBLEM.format(problem="down: "))
    assert len(mcp_spawn_log.read_text().split()) == 1  # the explicit action did connect


def test_list_tools_action_on_the_agent_list(staff_client, agent_factory, sub_agent, mcp_service_stdio):
    agent = agent_factory(sub_agents=[sub_agent], mcp_services=[mcp_service_stdio])
    [(level, text)] = admin_action_run(staff_client, changelist="admin:agents_app_agent_changelist",
                                       action="offered_tools_list", objects=[agent])
    assert level == "success" and "tools__env_keys" in text and "call_canteen" in text


def test_a_view_only_user_cannot_start_mcp_servers_from_the_agent_page(client, db, agent_factory, sub_agent,
                                                                       mcp_service_stdio, mcp_spawn_log):
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission

    viewer = get_user_model().objects.create_user(username="viewer", is_staff=True)
    viewer.user_permissions.set(Permission.objects.filter(codename="view_agent"))
    client.force_login(viewer)
    agent = agent_factory(sub_agents=[sub_agent], mcp_services=[mcp_service_stdio])

    page = client.get(reverse("admin:agents_app_agent_change", args=[agent.pk])).content.decode()
    button = reverse("admin:agents_app_agent_tools", args=[agent.pk])
    assert button not in page
    assert client.post(button).status_code == 403
    assert mcp_spawn_log.read_text() == ""


def test_saving_a_mcp_service_no_agent_uses_says_how_to_offer_it(staff_client, agent_factory, mcp_service_http):
    """As for a sub-agent: saved is not offered, and staff expected the model to see its tools (issue 42)."""
    from agents_app.admin import MCP_NOT_OFFERED_TEXT
    from testkit.web.admin_forms import admin_form_data

    url = reverse("admin:agents_app_mcpservice_change", args=[mcp_service_http.pk])
    response = staff_client.post(url, admin_form_data(staff_client.get(url), timeout_sec=20), follow=True)
    assert MCP_NOT_OFFERED_TEXT.format(name="http-tools") in [str(m) for m in response.context["messages"]]

    agent_factory(mcp_services=[mcp_service_http])
    response = staff_client.post(url, admin_form_data(staff_client.get(url), timeout_sec=25), follow=True)
    assert MCP_NOT_OFFERED_TEXT.format(name="http-tools") not in [str(m) for m in response.context["messages"]]
