"""The catalog's history in admin: old values kept, a version's diff against the live row, and
rollback (campus_agent.base.history, campus_agent.base.admin_history). An agent's rollback goes through its
routing preview first: insights_app/tests/test_history_rollback.py."""
import pytest
from django.db import connection
from django.urls import reverse

from agents_app.models import Agent, McpService, Provider
from campus_agent.base.history import HIDDEN_VALUE_TEXT
from subagents_app.models import SubAgent
from testkit.web.admin_forms import admin_form_data

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]

OLD_PROMPT = "你是校园小智。\n回答要简短。\n不知道就说不知道。"
NEW_PROMPT = "你是校园小智。\n回答要详细，并给出出处。\n不知道就说不知道。"


def _change(client, agent: Agent, **fields):
    """Saves the agent through its change form, as staff do."""
    data = {
        "name": agent.name, "slug": agent.slug, "system_prompt": agent.system_prompt, "provider": agent.provider_id or "",
        "model": agent.model, "thinking": agent.thinking, "temperature": agent.temperature,
        "max_tool_rounds": agent.max_tool_rounds, "enabled": "on" if agent.enabled else "",
        "is_default": "on" if agent.is_default else "",
        "mcp_services": [s.pk for s in agent.mcp_services.all()], "sub_agents": [s.pk for s in agent.sub_agents.all()],
        "fallbacks-TOTAL_FORMS": "0", "fallbacks-INITIAL_FORMS": "0",
    }
    data.update(fields)
    response = client.post(reverse("admin:agents_app_agent_change", args=[agent.pk]), {k: v for k, v in data.items()
                                                                                       if v != ""})
    assert response.status_code == 302, response.content.decode()[:3000]
    agent.refresh_from_db()
    return agent


def test_two_prompt_edits_keep_both_old_values_with_who_and_what(staff_client, staff_user, agent):
    first = agent.system_prompt
    _change(staff_client, agent, system_prompt=OLD_PROMPT)
    _change(staff_client, agent, system_prompt=NEW_PROMPT)

    versions = list(agent.history.order_by("history_date", "history_id").values_list("system_prompt", "history_user_id"))
    prompts = [prompt for prompt, _ in versions]
    assert sorted(set(prompts), key=prompts.index) == [first, OLD_PROMPT, NEW_PROMPT]
    assert versions[-1] == (NEW_PROMPT, staff_user.pk)  # the middleware's user
    assert (OLD_PROMPT, staff_user.pk) in versions

    page = staff_client.get(reverse("admin:agents_app_agent_history", args=[agent.pk])).content.decode()
    assert page.count("系统提示词") >= 2 and "teacher" in page  # field names by verbose_name, and who


def test_the_diff_page_shows_the_old_and_new_prompt_lines_escaped(staff_client, agent):
    _change(staff_client, agent, system_prompt=OLD_PROMPT + "\n<script>alert(1)</script>")
    version = agent.history.latest()
    _change(staff_client, agent, system_prompt=NEW_PROMPT)

    page = staff_client.get(reverse("admin:agents_app_agent_simple_history", args=[agent.pk, version.history_id]))
    html = page.content.decode()
    assert page.status_code == 200
    assert "- 回答要简短。" in html and "+ 回答要详细，并给出出处。" in html
    assert "history-line-same" in html and "不知道就说不知道。" in html
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;" in html
    assert reverse("admin:agents_app_agent_history_rollback", args=[agent.pk, version.history_id]) in html
    assert "先用该版本重放本智能体的路由用例" in html  # the agent's rollback checks routing first


def test_rollback_restores_the_prompt_and_the_tool_links_as_a_new_entry(staff_client, agent, sub_agent,
                                                                        mcp_service_http):
    _change(staff_client, agent, system_prompt=OLD_PROMPT, mcp_services=[mcp_service_http.pk])
    version = agent.history.latest()
    _change(staff_client, agent, system_prompt=NEW_PROMPT, mcp_services=[], sub_agents=[])
    assert not agent.sub_agents.exists()
    count = agent.history.count()

    url = reverse("admin:agents_app_agent_history_rollback", args=[agent.pk, version.history_id])
    response = staff_client.post(url, {"confirm": "1"})
    if response.status_code == 200:  # insights_app's routing preview first: confirm it
        response = staff_client.post(url, {"confirm": "1", **_confirm_fields(response)})

    assert response.status_code == 302
    agent.refresh_from_db()
    assert agent.system_prompt == OLD_PROMPT
    assert list(agent.mcp_services.all()) == [mcp_service_http] and list(agent.sub_agents.all()) == [sub_agent]
    latest = agent.history.latest()
    assert agent.history.count() == count + 1  # one entry, links included
    assert latest.history_change_reason.startswith("回滚到 ")
    assert [row.mcpservice_id for row in latest.mcp_services.all()] == [mcp_service_http.pk]


def _confirm_fields(page) -> dict:
    import re

    return dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', page.content.decode()))


def test_rollback_is_a_post_with_csrf(agent, staff_user, client):
    from django.test import Client

    agent.system_prompt = NEW_PROMPT
    agent.save()
    version = agent.history.earliest()
    url = reverse("admin:agents_app_agent_history_rollback", args=[agent.pk, version.history_id])
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(staff_user)
    # Opened by address (issue 42: a blank 405): the version's diff, with its rollback button.
    diff = reverse("admin:agents_app_agent_simple_history", args=[agent.pk, version.history_id])
    opened = strict.get(url, follow=True)
    assert opened.redirect_chain == [(diff, 302)] and "回滚到此版本" in opened.content.decode()
    assert strict.post(url, {"confirm": "1"}).status_code == 403  # no CSRF token
    agent.refresh_from_db()
    assert agent.system_prompt == NEW_PROMPT


def test_staff_without_change_permission_cannot_roll_back(client, agent, password):
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission

    viewer = get_user_model().objects.create_user(username="viewer", password=password, is_staff=True)
    viewer.user_permissions.set(Permission.objects.filter(codename="view_agent"))
    client.force_login(viewer)
    agent.system_prompt = NEW_PROMPT
    agent.save()
    version = agent.history.earliest()

    page = client.get(reverse("admin:agents_app_agent_simple_history", args=[agent.pk, version.history_id]))
    assert page.status_code == 200 and "回滚到此版本" not in page.content.decode()
    url = reverse("admin:agents_app_agent_history_rollback", args=[agent.pk, version.history_id])
    assert client.post(url, {"confirm": "1"}).status_code == 403
    agent.refresh_from_db()
    assert agent.system_prompt == NEW_PROMPT


def test_a_provider_history_row_holds_no_key(staff_client, provider_factory):
    provider = provider_factory(name="dashscope", base_url="https://dashscope.example/v1", key="sk-secret-9999")
    provider.api_key_store("sk-secret-other")
    provider.save()

    table = Provider.history.model._meta.db_table
    columns = [c.name for c in connection.introspection.get_table_description(connection.cursor(), table)]
    assert "api_key_encrypted" not in columns
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {table}")
        rows = cursor.fetchall()
    assert len(rows) == 2
    assert not any(provider.api_key_encrypted in str(value) or "sk-secret" in str(value) for row in rows for value in row)

    # A rollback keeps the current key (the version has none to restore).
    provider.default_model = "qwen-max"
    provider.save()
    version = provider.history.earliest()
    staff_client.post(reverse("admin:agents_app_provider_history_rollback", args=[provider.pk, version.history_id]))
    provider.refresh_from_db()
    assert provider.default_model == "fake-model" and provider.api_key_plain() == "sk-secret-other"


def test_a_mcp_service_config_diff_does_not_show_header_values(staff_client):
    service = McpService.objects.create(name="library", protocol="streamable-http", config={
        "url": "https://mcp.example.edu.cn/mcp", "headers": {"X-Api-Key": "old-secret-111", "X-Keep": "same-222"}})
    version = service.history.latest()
    service.config = {"url": "https://mcp2.example.edu.cn/mcp",
                      "headers": {"X-Api-Key": "new-secret-333", "X-Keep": "same-222"}}
    service.save()

    html = staff_client.get(reverse("admin:agents_app_mcpservice_simple_history",
                                    args=[service.pk, version.history_id])).content.decode()
    assert "连接配置" in html and "mcp2.example.edu.cn" in html  # the rest of the config is shown
    assert f"headers.X-Api-Key：{HIDDEN_VALUE_TEXT}" in html
    assert "headers.X-Keep" not in html  # unchanged
    assert not any(secret in html for secret in ("old-secret-111", "new-secret-333", "same-222"))
    history = staff_client.get(reverse("admin:agents_app_mcpservice_history", args=[service.pk])).content.decode()
    assert "连接配置" in history and "secret" not in history


def test_a_non_superuser_rollback_keeps_the_superuser_only_fields(editor_client):
    service = McpService.objects.create(name="library", protocol="streamable-http", timeout_sec=10,
                                        config={"url": "https://old.example.edu.cn/mcp"})
    version = service.history.latest()
    service.config = {"url": "https://new.example.edu.cn/mcp"}
    service.timeout_sec = 20
    service.save()

    page = editor_client.get(reverse("admin:agents_app_mcpservice_simple_history", args=[service.pk, version.history_id]))
    assert "只有超级管理员可以修改：回滚时保持当前值" in page.content.decode()
    editor_client.post(reverse("admin:agents_app_mcpservice_history_rollback", args=[service.pk, version.history_id]))
    service.refresh_from_db()
    assert service.timeout_sec == 10 and service.config == {"url": "https://new.example.edu.cn/mcp"}


def test_a_sub_agent_rollback_restores_its_description(staff_client, sub_agent):
    old = sub_agent.description
    sub_agent.description = "坏掉的描述"
    sub_agent.save()
    version = sub_agent.history.earliest()
    response = staff_client.post(reverse("admin:subagents_app_subagent_history_rollback",
                                         args=[sub_agent.pk, version.history_id]), {"confirm": "1"})
    assert response.status_code == 302
    assert SubAgent.objects.get(pk=sub_agent.pk).description == old


def test_a_mcp_service_rollback_drops_its_cached_tool_list(staff_client, mcp_service_http):
    """The next turn lists the rolled-back service's tools again, without a restart."""
    from agents_app.mcp.tool_cache import McpToolInfo, mcp_tools_cached, mcp_tools_remember

    mcp_service_http.timeout_sec = 7
    mcp_service_http.save()
    version = mcp_service_http.history.earliest()
    mcp_tools_remember(mcp_service_http, [McpToolInfo(name="add", description="", input_schema=None)])
    assert mcp_tools_cached(mcp_service_http) is not None

    staff_client.post(reverse("admin:agents_app_mcpservice_history_rollback", args=[mcp_service_http.pk,
                                                                                    version.history_id]))
    mcp_service_http.refresh_from_db()
    assert mcp_service_http.timeout_sec != 7
    assert mcp_tools_cached(mcp_service_http) is None


def test_every_catalog_page_has_its_history_and_diff(staff_client, sub_agent, provider_factory):
    provider = provider_factory(name="vllm", base_url="http://10.0.0.5:8001/v1", key="sk-secret-1")
    for obj, field, value in ((sub_agent, "timeout_sec", 9), (provider, "default_model", "qwen3")):
        setattr(obj, field, value)
        obj.save()
        opts = obj._meta
        history = staff_client.get(reverse(f"admin:{opts.app_label}_{opts.model_name}_history", args=[obj.pk]))
        assert history.status_code == 200
        assert str(opts.get_field(field).verbose_name) in history.content.decode()
        version = obj.history.earliest()
        diff = staff_client.get(reverse(f"admin:{opts.app_label}_{opts.model_name}_simple_history",
                                        args=[obj.pk, version.history_id]))
        assert diff.status_code == 200 and str(value) in diff.content.decode()
        assert "sk-secret" not in diff.content.decode() + history.content.decode()
    missing = staff_client.get(reverse("admin:agents_app_provider_simple_history", args=[provider.pk, "x"]))
    assert missing.status_code == 404


def _change_page(obj) -> str:
    opts = obj._meta
    return reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[obj.pk])


@pytest.mark.parametrize("kind, field", [("agent", "system_prompt"), ("sub_agent", "description"),
                                         ("sub_agent", "example_questions")])
def test_a_text_saved_as_a_browser_sends_it_keeps_its_lines_and_an_unchanged_save_is_no_version(
        staff_client, request, kind, field):
    """A browser sends a textarea's lines with CRLF: stored (and sent to the model) with LF, so a
    save that changes nothing stores nothing new and adds no version (issue 42)."""
    obj = request.getfixturevalue(kind)
    setattr(obj, field, OLD_PROMPT)
    obj.save()
    versions = obj.history.count()
    url = _change_page(obj)

    data = admin_form_data(staff_client.get(url))
    assert data[field] == OLD_PROMPT.replace("\n", "\r\n")  # as the browser posts it
    assert staff_client.post(url, data).status_code == 302
    obj.refresh_from_db()
    assert getattr(obj, field) == OLD_PROMPT
    assert obj.history.count() == versions

    typed = admin_form_data(staff_client.get(url), **{field: NEW_PROMPT})
    assert staff_client.post(url, typed).status_code == 302
    obj.refresh_from_db()
    assert getattr(obj, field) == NEW_PROMPT and "\r" not in getattr(obj, field)
    assert obj.history.count() == versions + 1
    history = staff_client.get(reverse(f"admin:{obj._meta.app_label}_{obj._meta.model_name}_history", args=[obj.pk]))
    assert history.context["page_obj"][0].history_changed_labels == [str(obj._meta.get_field(field).verbose_name)]


@pytest.mark.django_db(transaction=True)
def test_the_model_reads_the_prompt_with_lf(live_asgi, llm_settings, staff_client, agent, user):
    from chat_app.accounts.sessions import auth_session_create
    from testkit.web.sse import chat

    url = _change_page(agent)
    assert staff_client.post(url, admin_form_data(staff_client.get(url), system_prompt=NEW_PROMPT)).status_code == 302
    token = auth_session_create(user=user, via="password", roles=["student"], campus_token="").access_token
    llm_settings.reply_text("好的")
    chat(live_asgi, {"message": "你好"}, headers={"Authorization": f"Bearer {token}"})
    assert llm_settings.last_request.messages[0]["content"].startswith(NEW_PROMPT)


def test_the_current_version_offers_no_comparison(staff_client, agent):
    """The newest version is the agent as it is: 与当前对比 there would show nothing (issue 42)."""
    _change(staff_client, agent, system_prompt=OLD_PROMPT)
    _change(staff_client, agent, system_prompt=NEW_PROMPT)
    page = staff_client.get(reverse("admin:agents_app_agent_history", args=[agent.pk]))
    rows = page.content.decode().split("<tbody>")[1].split("</tr>")[:-1]
    assert len(rows) == agent.history.count()
    assert "当前版本" in rows[0] and "与当前对比" not in rows[0]
    assert all("与当前对比" in row and "当前版本" not in row for row in rows[1:])

    Agent.objects.filter(pk=agent.pk).update(temperature=0.1)  # changed without a save: the newest differs now
    page = staff_client.get(reverse("admin:agents_app_agent_history", args=[agent.pk])).content.decode()
    assert "当前版本" not in page


@pytest.mark.parametrize("model", [Agent, McpService, SubAgent])
def test_the_groups_an_item_is_limited_to_are_set_in_admin_and_kept_in_its_history(model, staff_client, agent,
                                                                                    mcp_service_http):
    """Issue 43: `allowed_groups` on each catalog page (filter_horizontal, the help text says what
    it does), each change a version, and a rollback opens the item again."""
    from django.contrib.auth.models import Group

    graduates = Group.objects.create(name="研究生")
    item = {Agent: agent, McpService: mcp_service_http, SubAgent: agent.sub_agents.get()}[model]
    meta = model._meta
    url = reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[item.pk])
    page = staff_client.get(url)
    assert "可用的用户组" in page.content.decode() and "留空：所有用户都能用" in page.content.decode()
    assert "allowed_groups" in page.context["adminform"].form.fields
    open_version = item.history.latest()

    response = staff_client.post(url, admin_form_data(page, allowed_groups=[graduates.pk]))
    assert response.status_code == 302
    assert [g.name for g in model.objects.get(pk=item.pk).allowed_groups.all()] == ["研究生"]
    assert [row.group_id for row in item.history.latest().allowed_groups.all()] == [graduates.pk]

    rollback = reverse(f"admin:{meta.app_label}_{meta.model_name}_history_rollback",
                       args=[item.pk, open_version.history_id])
    response = staff_client.post(rollback, {"confirm": "1"})
    if response.status_code == 200:  # an agent's routing preview first: confirm it
        response = staff_client.post(rollback, {"confirm": "1", **_confirm_fields(response)})
    assert response.status_code == 302
    assert not model.objects.get(pk=item.pk).allowed_groups.exists()
