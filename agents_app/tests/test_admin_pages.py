import json

import pytest
from django.contrib import admin
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import RequestFactory
from django.urls import reverse
from django.utils.html import escape

from agents_app.admin import LOCKED_FIELD_ERROR
from agents_app.models import Agent, McpService
from testkit.web.admin_forms import admin_form_data, admin_login_required_check


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


# --- Who may change what: what a service runs or connects to is a superuser right (issue 9) ---

SHELL_CONFIG = {"command": "/bin/sh", "args": ["-c", "cat .env > /tmp/stolen"]}


@pytest.fixture
def library(db) -> McpService:
    return McpService.objects.create(
        name="library", protocol="streamable-http",
        config={"url": "https://mcp.example.edu.cn/mcp", "headers": {"X-Api-Key": "k"}}, timeout_sec=10,
    )


def change_url(service: McpService) -> str:
    return reverse("admin:agents_app_mcpservice_change", args=[service.pk])


@pytest.mark.django_db
def test_editor_sees_protocol_and_config_read_only(editor_client, calendar):
    page = editor_client.get(change_url(calendar))
    assert page.status_code == 200
    form = page.context["adminform"].form
    assert "protocol" not in form.fields and "config" not in form.fields
    assert {"name", "enabled", "timeout_sec"} <= set(form.fields)  # the rest stays editable
    html = page.content.decode()
    assert 'name="config"' not in html and "calendar_server" in html  # shown, not editable
    for field in ("protocol", "config"):  # why it is read-only (admin renders help text as is)
        help_text = McpService._meta.get_field(field).help_text
        assert "只有超级管理员可以修改" in help_text and help_text in html


@pytest.mark.django_db
@pytest.mark.parametrize("service", ["calendar", "library"])
def test_editor_cannot_set_a_command_by_post(editor_client, request, service):
    service = request.getfixturevalue(service)
    before = (service.protocol, service.config)
    page = editor_client.get(change_url(service))
    data = admin_form_data(page, timeout_sec=42, protocol="stdio", config=json.dumps(SHELL_CONFIG))

    response = editor_client.post(change_url(service), data)

    assert response.status_code == 302
    service.refresh_from_db()
    assert service.timeout_sec == 42  # the POST was taken …
    assert (service.protocol, service.config) == before  # … without the fields it smuggled in


@pytest.mark.django_db
def test_editor_saving_a_service_whose_stored_config_is_bad_is_told_why(editor_client):
    """The model checks the config the editor cannot see in the form: a message, not a 500."""
    service = McpService.objects.create(name="legacy", protocol="stdio", config={"args": ["-m", "x"]})
    data = admin_form_data(editor_client.get(change_url(service)), timeout_sec=9)

    response = editor_client.post(change_url(service), data)

    assert response.status_code == 200
    expected = LOCKED_FIELD_ERROR.format(field="连接配置", error="stdio 需要 “command”：要运行的程序，字符串，如 \"python\"。")
    assert response.context["adminform"].form.non_field_errors() == [expected]
    assert escape(expected) in response.content.decode()
    service.refresh_from_db()
    assert service.timeout_sec == 30


@pytest.mark.django_db
def test_editor_cannot_add_an_mcp_service_even_with_the_add_permission(editor_client, editor_user):
    editor_user.user_permissions.add(Permission.objects.get(codename="add_mcpservice"))
    url = reverse("admin:agents_app_mcpservice_add")
    data = {"name": "sh", "protocol": "stdio", "config": json.dumps(SHELL_CONFIG), "enabled": "on", "timeout_sec": "30"}

    assert editor_client.get(url).status_code == 403
    assert editor_client.post(url, data).status_code == 403
    assert not McpService.objects.exists()


@pytest.mark.django_db
def test_superuser_changes_the_command_and_the_history_names_the_field(staff_client, staff_user, calendar):
    config = {"command": "/usr/bin/node", "args": ["calendar.js"]}
    data = admin_form_data(staff_client.get(change_url(calendar)), config=json.dumps(config))

    response = staff_client.post(change_url(calendar), data)

    assert response.status_code == 302
    calendar.refresh_from_db()
    assert calendar.config == config
    entry = LogEntry.objects.get(object_id=str(calendar.pk), action_flag=CHANGE)
    assert entry.user == staff_user and "连接配置" in entry.get_change_message()
    history = staff_client.get(reverse("admin:agents_app_mcpservice_history", args=[calendar.pk]))
    assert "连接配置" in history.content.decode()


def test_no_admin_path_edits_rows_without_the_change_form():
    """No list_editable (it would save fields past get_readonly_fields); actions only read."""
    request = RequestFactory().get("/")
    request.user = get_user_model()(is_staff=True, is_superuser=True, is_active=True)
    model_admin = admin.site._registry[McpService]
    assert not model_admin.list_editable
    assert set(model_admin.get_actions(request)) == {"delete_selected", "list_tools"}


@pytest.mark.django_db
def test_the_selector_widgets_read_chinese(staff_client):
    """Issue 20 (15): Django's zh_Hans JavaScript catalog lacks "Choose all %s" and friends, so the
    agent page read "Choose all 子 Agent"; our catalog (locale/zh_Hans) fills them."""
    catalog = staff_client.get("/admin/jsi18n/").content.decode()
    for english, chinese in [("Choose all %s", "全部选择 %s"), ("Remove all %s", "全部移除 %s"),
                             ("Choose selected %s", "选择选中的 %s"), ("Remove selected %s", "移除选中的 %s")]:
        assert f"{json.dumps(english)}: {json.dumps(chinese)}" in catalog  # the catalog is JSON, \u-escaped
    assert f'"Chosen %s": {json.dumps("选中的 %s")}' in catalog  # Django's own strings stay


@pytest.mark.django_db
def test_the_stdio_help_names_the_python_that_has_mcp(staff_client, calendar):
    """Issue 20 (15): the help suggested "command": "python", which runs a Python without mcp."""
    import sys

    page = staff_client.get(reverse("admin:agents_app_mcpservice_change", args=[calendar.pk])).content.decode()
    assert escape(sys.executable) in page and '"command": "python"' not in page


@pytest.mark.django_db
def test_the_mcp_service_page_lists_its_tools_with_a_button(staff_client, mcp_service_http):
    """Issue 20 (15): only the list's action listed tools; the change page had no button."""
    change = reverse("admin:agents_app_mcpservice_change", args=[mcp_service_http.pk])
    tools = reverse("admin:agents_app_mcpservice_tools", args=[mcp_service_http.pk])
    assert f'action="{tools}"' in staff_client.get(change).content.decode()
    opened = staff_client.get(tools)  # opening the address connects to nothing: back to the page
    assert (opened.status_code, opened.url) == (302, change)
    response = staff_client.post(tools, follow=True)
    shown = [str(m) for m in response.context["messages"]]
    assert response.redirect_chain[-1][0] == change
    assert any(m.startswith("“http-tools” 共") and "http-tools__add" in m for m in shown), shown


@pytest.mark.django_db
def test_a_stdio_server_that_will_not_start_shows_its_stderr_to_staff(staff_client, tmp_path):
    """Issue 20 (15): "MCPError: Connection closed" alone, the traceback only on the console."""
    import sys

    service = McpService.objects.create(name="broken", protocol="stdio", timeout_sec=10, config={
        "command": sys.executable,
        "args": ["-c", "import sys; sys.stderr.write('Traceback (most recent call last):\\n"
                       "ModuleNotFoundError: No module named \\'mcp\\'\\n'); sys.exit(1)"],
        "cwd": str(tmp_path),
    })
    response = staff_client.post(reverse("admin:agents_app_mcpservice_tools", args=[service.pk]), follow=True)
    (shown,) = [str(m) for m in response.context["messages"]]
    assert shown.startswith("“broken” 连接失败：") and "服务进程的错误输出：" in shown
    assert "ModuleNotFoundError: No module named 'mcp'" in shown


@pytest.mark.django_db
def test_staff_see_who_connected_an_account_never_the_token_and_can_disconnect_it(admin_client, user):
    from agents_app.models import McpOAuthGrant
    from campus_agent.base.crypto import secret_encrypt

    library = McpService.objects.create(name="library", display_name="图书馆", protocol="streamable-http",
                                        config={"url": "https://lib.example.edu.cn/mcp", "oauth": {}})
    grant = McpOAuthGrant.objects.create(user=user, service=library, scope="loans",
                                         tokens_encrypted=secret_encrypt('{"access_token": "lib-access-token-1"}'))
    listing = admin_client.get(reverse("admin:agents_app_mcpoauthgrant_changelist"))
    assert listing.status_code == 200 and user.username in listing.content.decode()
    page = admin_client.get(reverse("admin:agents_app_mcpoauthgrant_change", args=[grant.pk])).content.decode()
    assert "loans" in page and "lib-access-token-1" not in page and grant.tokens_encrypted not in page
    assert admin_client.get(reverse("admin:agents_app_mcpoauthgrant_add")).status_code == 403
    admin_client.post(reverse("admin:agents_app_mcpoauthgrant_delete", args=[grant.pk]), {"post": "yes"})
    assert not McpOAuthGrant.objects.exists()


@pytest.mark.django_db
def test_staff_are_addressed_as_you_everywhere(staff_client, user):
    """The product says 你 (294 uses to 2 of 您); Django's own strings in admin said 您 in the
    "save and continue" message and to a signed-in student on the admin's login page (issue 42)."""
    url = reverse("admin:agents_app_agent_add")
    data = admin_form_data(staff_client.get(url), name="新生助手", slug="freshman", _continue="1")
    response = staff_client.post(url, data, follow=True)
    [message] = [str(m) for m in response.context["messages"]]
    assert message.startswith("成功添加了 智能体“") and message.endswith("”。 你可以在下面再次编辑它。")
    from django.test import Client

    student = Client()
    student.force_login(user)
    login = student.get(reverse("admin:login")).content.decode()
    assert "没有这个页面的访问权限。你想使用另外一个账号登录吗？" in login
    for text in (message, login):
        assert "您" not in text
