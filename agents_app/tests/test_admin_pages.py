import json

import pytest
from django.urls import reverse
from django.utils.html import escape

from agents_app.models import Agent, McpService
from campus_agent.testing.admin_forms import admin_form_data, admin_login_required_check


@pytest.fixture
def calendar(db) -> McpService:
    return McpService.objects.create(
        name="calendar", protocol="stdio", config={"command": "python", "args": ["-m", "calendar_server"]}
    )


@pytest.fixture
def xiaozhi(db, calendar, canteen) -> Agent:
    agent = Agent.objects.create(slug="xiaozhi", name="校园小智", is_default=True, system_prompt="你是校园小智。")
    agent.mcp_services.add(calendar)
    agent.sub_agents.add(canteen)
    return agent


def admin_pages(xiaozhi: Agent, calendar: McpService) -> list[str]:
    return [
        reverse("admin:agents_app_agent_changelist"),
        reverse("admin:agents_app_agent_add"),
        reverse("admin:agents_app_agent_change", args=[xiaozhi.pk]),
        reverse("admin:agents_app_mcpservice_changelist"),
        reverse("admin:agents_app_mcpservice_add"),
        reverse("admin:agents_app_mcpservice_change", args=[calendar.pk]),
    ]


@pytest.mark.django_db
def test_staff_sees_every_agent_and_mcp_page(staff_client, xiaozhi, calendar):
    for url in admin_pages(xiaozhi, calendar):
        response = staff_client.get(url)
        assert response.status_code == 200, url


@pytest.mark.django_db
def test_changelists_list_the_rows(staff_client, xiaozhi, calendar):
    agents = staff_client.get(reverse("admin:agents_app_agent_changelist")).content.decode()
    assert "校园小智" in agents and "xiaozhi" in agents
    services = staff_client.get(reverse("admin:agents_app_mcpservice_changelist")).content.decode()
    assert "calendar" in services


@pytest.mark.django_db
def test_agent_change_page_has_a_prompt_editor_tool_pickers_and_help(staff_client, xiaozhi):
    page = staff_client.get(reverse("admin:agents_app_agent_change", args=[xiaozhi.pk]))
    form = page.context["adminform"].form
    assert int(form.fields["system_prompt"].widget.attrs["rows"]) >= 15  # room to write
    html = page.content.decode()
    assert "你是校园小智。" in html
    assert html.count("selectfilter") >= 2  # filter_horizontal widgets for both tool lists
    for field in ("mcp_services", "sub_agents"):
        assert f'name="{field}"' in html
    assert Agent._meta.get_field("is_default").help_text in html


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["student", "anonymous"])
def test_non_staff_are_sent_to_the_admin_login(client, user, xiaozhi, calendar, who):
    if who == "student":
        client.force_login(user)
    admin_login_required_check(client, admin_pages(xiaozhi, calendar))


@pytest.mark.django_db
def test_non_staff_cannot_create_an_agent_by_post(student_client):
    response = student_client.post(reverse("admin:agents_app_agent_add"), {"name": "x", "slug": "x"})
    assert response.status_code == 302
    assert not Agent.objects.exists()


@pytest.mark.django_db
def test_staff_creates_an_agent_with_a_sub_agent_and_an_mcp_service(staff_client, calendar, canteen):
    url = reverse("admin:agents_app_agent_add")
    data = admin_form_data(
        staff_client.get(url),
        name="选课助手",
        slug="course-helper",
        system_prompt="你是选课助手，回答选课问题时调用 call_canteen 之外的工具要谨慎。",
        is_default=True,
        mcp_services=[calendar.pk],
        sub_agents=[canteen.pk],
    )

    response = staff_client.post(url, data)

    assert response.status_code == 302, response.context["adminform"].form.errors
    agent = Agent.objects.get(slug="course-helper")
    assert (agent.name, agent.is_default, agent.enabled) == ("选课助手", True, True)
    assert list(agent.mcp_services.all()) == [calendar]
    assert list(agent.sub_agents.all()) == [canteen]
    assert agent.effective_model  # blank model falls back to the settings default


@pytest.mark.django_db
def test_admin_refuses_a_second_default_agent(staff_client, xiaozhi):
    url = reverse("admin:agents_app_agent_add")
    data = admin_form_data(staff_client.get(url), name="另一个", slug="other", is_default=True)

    response = staff_client.post(url, data)

    assert response.status_code == 200
    assert escape("已有默认智能体“校园小智”，请先取消它的默认。") in response.content.decode()
    assert not Agent.objects.filter(slug="other").exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    "protocol, config, message",
    [
        ("stdio", {"args": ["-m", "x"]}, "stdio 需要 “command”：要运行的程序，字符串，如 \"python\"。"),
        ("stdio", {"command": "python", "args": "-m x"}, "“args” 必须是字符串列表"),
        ("streamable-http", {"url": "ftp://mcp.example.edu.cn"}, "streamable-http 需要 “url”：http:// 或 https:// 开头的地址。"),
    ],
)
def test_admin_rejects_a_bad_mcp_config_with_the_chinese_message(staff_client, protocol, config, message):
    url = reverse("admin:agents_app_mcpservice_add")
    data = admin_form_data(staff_client.get(url), name="calendar", protocol=protocol, config=json.dumps(config))

    response = staff_client.post(url, data)

    assert response.status_code == 200
    assert escape(message) in response.content.decode()  # shown to staff, next to the field
    assert not McpService.objects.exists()


@pytest.mark.django_db
def test_admin_rejects_config_that_is_not_json(staff_client):
    url = reverse("admin:agents_app_mcpservice_add")
    data = admin_form_data(staff_client.get(url), name="calendar", protocol="stdio", config="{command: python")

    response = staff_client.post(url, data)

    assert response.status_code == 200
    assert response.context["adminform"].form.errors["config"]
    assert not McpService.objects.exists()


@pytest.mark.django_db
def test_admin_saves_a_good_mcp_service(staff_client):
    url = reverse("admin:agents_app_mcpservice_add")
    config = {"url": "https://mcp.example.edu.cn/mcp", "headers": {"X-Api-Key": "k"}}
    data = admin_form_data(
        staff_client.get(url), name="library", protocol="streamable-http", config=json.dumps(config), timeout_sec=10
    )

    response = staff_client.post(url, data)

    assert response.status_code == 302
    service = McpService.objects.get(name="library")
    assert (service.protocol, service.config, service.timeout_sec) == ("streamable-http", config, 10)
