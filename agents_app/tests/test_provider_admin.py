"""Admin: model providers. The API key is write-only (stored encrypted, never shown again), and
「测试连接」 lists the provider's models with its key, over a real socket to the scripted server."""
import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.contrib.messages import get_messages
from django.db import connection
from django.test import Client
from django.urls import reverse
from loguru import logger

from agents_app.models import BASE_URL_ERROR, Provider
from agents_app.runtime.providers import PROBE_CONNECT_TEXT
from campus_agent.base.admin_secrets import KEY_BOTH_ERROR as API_KEY_BOTH_ERROR
from campus_agent.base.admin_secrets import KEY_SET_TEXT as API_KEY_SET_TEXT
from campus_agent.base.admin_secrets import KEY_UNREADABLE_TEXT as API_KEY_UNREADABLE_TEXT

pytestmark = pytest.mark.django_db

KEY = "sk-admin-entered-0123456789abcdef"


def _form(**fields) -> dict:
    data = {"name": "百炼", "kind": "dashscope", "base_url": "http://127.0.0.1:9/v1", "api_key": "", "api_key_env": "",
            "default_model": "qwen-plus", "timeout_sec": "30", "enabled": "on"}
    data.update(fields)
    return {k: v for k, v in data.items() if v is not None}


def _stored_column(pk) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT api_key_encrypted FROM agents_app_provider WHERE id = %s", [pk])
        return cursor.fetchone()[0]


@pytest.fixture
def log_lines():
    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(str(message)), level="DEBUG", format="{message} {extra}")
    yield lines
    logger.remove(sink)


def test_the_key_is_stored_encrypted_and_never_shown(staff_client, llm_server, log_lines):
    response = staff_client.post(reverse("admin:agents_app_provider_add"),
                                 _form(base_url=llm_server.url, api_key=KEY, default_model="fake-model"))
    assert response.status_code == 302, response.content.decode()[:2000]
    provider = Provider.objects.get()

    stored = _stored_column(provider.pk)
    assert stored and KEY not in stored and KEY[3:20] not in stored
    assert provider.api_key_plain() == KEY
    assert KEY not in repr(provider) and KEY not in str(provider)
    change = reverse("admin:agents_app_provider_change", args=[provider.pk])
    page = staff_client.get(change).content.decode()
    assert KEY not in page and stored not in page
    assert f"当前：{API_KEY_SET_TEXT}" in page
    listing = staff_client.get(reverse("admin:agents_app_provider_changelist")).content.decode()
    assert KEY not in listing and API_KEY_SET_TEXT in listing

    # 测试连接: the models the server lists, asked with the key
    test = reverse("admin:agents_app_provider_test", args=[provider.pk])
    assert f'action="{test}"' in page
    response = staff_client.post(test)
    assert response.status_code == 302 and response["Location"] == change
    [(level, text)] = [(m.level_tag, m.message) for m in get_messages(response.wsgi_request)]
    assert (level, text) == ("success", "“百炼”已连通，共 1 个模型：fake-model")
    assert llm_server.model_requests[-1].headers["authorization"] == f"Bearer {KEY}"
    assert KEY not in staff_client.get(change).content.decode()
    assert not any(KEY in line for line in log_lines)
    history = staff_client.get(reverse("admin:agents_app_provider_history", args=[provider.pk])).content.decode()
    assert KEY not in history


def test_the_key_is_hidden_from_error_reports(staff_client):
    from django.views.debug import SafeExceptionReporterFilter

    response = staff_client.post(reverse("admin:agents_app_provider_add"), _form(api_key=KEY, name=""))
    request = response.wsgi_request
    assert list(request.sensitive_post_parameters) == ["api_key"]
    assert SafeExceptionReporterFilter().get_post_parameters(request)["api_key"] != KEY


def test_blank_keeps_the_key_and_clear_removes_it(staff_client, provider_factory):
    provider = provider_factory(name="百炼", base_url="http://127.0.0.1:9/v1", key=KEY)
    change = reverse("admin:agents_app_provider_change", args=[provider.pk])
    stored = _stored_column(provider.pk)

    assert staff_client.post(change, _form(default_model="qwen-max")).status_code == 302
    provider.refresh_from_db()
    assert (provider.default_model, provider.api_key_plain(), _stored_column(provider.pk)) == ("qwen-max", KEY, stored)

    both = staff_client.post(change, _form(api_key="sk-new", api_key_clear="on"))
    assert both.status_code == 200 and API_KEY_BOTH_ERROR in both.content.decode()
    assert "sk-new" not in both.content.decode()  # not echoed back by the form either

    assert staff_client.post(change, _form(api_key_clear="on")).status_code == 302
    provider.refresh_from_db()
    assert (provider.api_key_plain(), _stored_column(provider.pk)) == ("", "")


def test_a_key_from_another_secret_asks_to_be_entered_again(staff_client, provider_factory, settings):
    provider = provider_factory(name="百炼", base_url="http://127.0.0.1:9/v1", key=KEY)
    settings.PROVIDER_KEY_SECRET = "rotated-secret"
    assert provider.api_key_plain() == ""
    page = staff_client.get(reverse("admin:agents_app_provider_change", args=[provider.pk])).content.decode()
    assert API_KEY_UNREADABLE_TEXT in page


def test_an_env_provider_reads_the_environment(staff_client, llm_server, provider_factory, monkeypatch):
    monkeypatch.setenv("CAMPUS_TEST_PROVIDER_KEY", "sk-from-the-environment-42")
    provider = provider_factory(name="vllm", base_url=llm_server.url, api_key_env="CAMPUS_TEST_PROVIDER_KEY")
    assert provider.api_key_plain() == "sk-from-the-environment-42" and _stored_column(provider.pk) == ""

    response = staff_client.post(reverse("admin:agents_app_provider_test", args=[provider.pk]))

    [message] = get_messages(response.wsgi_request)
    assert message.level_tag == "success"
    assert llm_server.model_requests[-1].headers["authorization"] == "Bearer sk-from-the-environment-42"
    page = staff_client.get(reverse("admin:agents_app_provider_change", args=[provider.pk])).content.decode()
    assert "sk-from-the-environment-42" not in page and "读取环境变量 CAMPUS_TEST_PROVIDER_KEY（已设置）" in page


def test_the_test_shows_the_connection_error_in_chinese(staff_client, provider_factory, unused_tcp_port, settings):
    settings.LLM_PROBE_TIMEOUT = 2
    provider = provider_factory(name="down", base_url=f"http://127.0.0.1:{unused_tcp_port}/v1", key=KEY)

    response = staff_client.post(reverse("admin:agents_app_provider_test", args=[provider.pk]))

    [message] = get_messages(response.wsgi_request)
    assert message.level_tag == "error" and message.message.startswith(PROBE_CONNECT_TEXT.format(name="down", reason=""))
    assert KEY not in message.message and "Traceback" not in message.message


def test_the_test_is_a_post_with_csrf_and_the_change_permission(client, staff_user, llm_server, provider_factory,
                                                                password):
    provider = provider_factory(name="百炼", base_url=llm_server.url, key=KEY)
    test = reverse("admin:agents_app_provider_test", args=[provider.pk])
    client.force_login(staff_user)
    opened = client.get(test)  # sends nothing: back to the provider's page
    assert (opened.status_code, opened.url) == (302, reverse("admin:agents_app_provider_change", args=[provider.pk]))

    strict = Client(enforce_csrf_checks=True)
    strict.force_login(staff_user)
    assert strict.post(test).status_code == 403  # no CSRF token
    assert llm_server.model_requests == []

    viewer = get_user_model().objects.create_user(username="viewer", password=password, is_staff=True)
    viewer.user_permissions.set(Permission.objects.filter(codename="view_provider"))
    client.force_login(viewer)
    page = client.get(reverse("admin:agents_app_provider_change", args=[provider.pk])).content.decode()
    assert test not in page and KEY not in page and API_KEY_SET_TEXT in page
    assert client.post(test).status_code == 403
    assert llm_server.model_requests == []


def test_where_requests_go_is_a_superuser_right(client, provider_factory, password):
    provider = provider_factory(name="百炼", base_url="http://127.0.0.1:9/v1", key=KEY)
    editor = get_user_model().objects.create_user(username="editor", password=password, is_staff=True)
    editor.user_permissions.set(Permission.objects.filter(codename__in=["view_provider", "change_provider",
                                                                        "add_provider"]))
    client.force_login(editor)
    change = reverse("admin:agents_app_provider_change", args=[provider.pk])

    response = client.post(change, _form(base_url="http://attacker.example.com/v1", api_key_env="SECRET_KEY",
                                          default_model="qwen-max"))

    assert response.status_code == 302
    provider.refresh_from_db()
    assert (provider.base_url, provider.api_key_env, provider.default_model) == (
        "http://127.0.0.1:9/v1", "", "qwen-max")
    assert provider.api_key_plain() == KEY
    assert client.get(reverse("admin:agents_app_provider_add")).status_code == 403


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"name": "名" * 10_000}, "64"),
        ({"base_url": "file:///etc/passwd"}, BASE_URL_ERROR),
        ({"base_url": "javascript:alert(1)"}, BASE_URL_ERROR),
        ({"api_key_env": "not a name; rm -rf"}, "环境变量名"),
        ({"timeout_sec": "100000"}, "600"),
    ],
)
def test_hostile_values_are_form_errors(staff_client, fields, error):
    response = staff_client.post(reverse("admin:agents_app_provider_add"), _form(**fields))
    assert response.status_code == 200
    assert error in response.content.decode()
    assert not Provider.objects.exists()


def test_the_agent_page_offers_provider_thinking_and_ordered_fallbacks(staff_client, agent, provider_factory):
    primary = provider_factory(name="主", base_url="http://127.0.0.1:9/v1")
    backup = provider_factory(name="备用", base_url="http://127.0.0.1:10/v1")
    change = reverse("admin:agents_app_agent_change", args=[agent.pk])
    page = staff_client.get(change).content.decode()
    assert 'name="provider"' in page and 'name="thinking"' in page and 'name="fallbacks-TOTAL_FORMS"' in page

    form = {"name": agent.name, "slug": agent.slug, "enabled": "on", "is_default": "on",
            "system_prompt": agent.system_prompt, "provider": str(primary.pk), "model": "", "thinking": "off",
            "temperature": "0.7", "max_tool_rounds": "5", "sub_agents": [str(s.pk) for s in agent.sub_agents.all()],
            "fallbacks-TOTAL_FORMS": "1", "fallbacks-INITIAL_FORMS": "0", "fallbacks-MIN_NUM_FORMS": "0",
            "fallbacks-MAX_NUM_FORMS": "1000", "fallbacks-0-position": "1", "fallbacks-0-provider": str(backup.pk),
            "fallbacks-0-model": "qwen-turbo"}
    response = staff_client.post(change, form)
    assert response.status_code == 302, response.content.decode()[:3000]
    agent.refresh_from_db()
    assert (agent.provider, agent.thinking, agent.effective_model) == (primary, "off", "fake-model")
    assert [(f.provider, f.model) for f in agent.fallbacks.all()] == [(backup, "qwen-turbo")]


def test_a_provider_an_agent_uses_cannot_be_deleted(staff_client, agent, provider_factory):
    provider = provider_factory(name="主", base_url="http://127.0.0.1:9/v1")
    agent.provider = provider
    agent.save()
    page = staff_client.post(reverse("admin:agents_app_provider_delete", args=[provider.pk]), {"post": "yes"})
    assert page.status_code == 200 and agent.name in page.content.decode()  # the agents that use it are named
    assert Provider.objects.filter(pk=provider.pk).exists()


def test_the_test_connection_action_on_the_provider_list(staff_client, llm_server, provider_factory, unused_tcp_port,
                                                         settings):
    """Like 列出工具 on MCP services and 健康检查 on sub-agents: each selected provider asked for its
    models, over a real socket, within LLM_PROBE_TIMEOUT (issue 42)."""
    from testkit.web.admin_forms import admin_action_run

    settings.LLM_PROBE_TIMEOUT = 2
    up = provider_factory(name="百炼", base_url=llm_server.url, key=KEY)
    down = provider_factory(name="down", base_url=f"http://127.0.0.1:{unused_tcp_port}/v1", key=KEY)

    shown = admin_action_run(staff_client, changelist="admin:agents_app_provider_changelist",
                             action="connection_test", objects=[up, down])

    [(down_level, down_text), up_shown] = shown  # by name
    assert up_shown == ("success", "“百炼”已连通，共 1 个模型：fake-model")
    assert down_level == "error" and down_text.startswith(PROBE_CONNECT_TEXT.format(name="down", reason=""))
    assert llm_server.model_requests[-1].headers["authorization"] == f"Bearer {KEY}"


def test_the_add_form_offers_no_clearing_and_states_no_current_key(staff_client, provider_factory):
    add = staff_client.get(reverse("admin:agents_app_provider_add")).content.decode()
    assert "清除已保存的密钥" not in add and 'name="api_key_clear"' not in add and "当前：" not in add
    assert 'name="api_key"' in add

    keyless = provider_factory(name="ollama", base_url="http://127.0.0.1:9/v1")
    page = staff_client.get(reverse("admin:agents_app_provider_change", args=[keyless.pk])).content.decode()
    assert 'name="api_key_clear"' not in page  # nothing saved to clear

    keyed = provider_factory(name="百炼", base_url="http://127.0.0.1:9/v1", key=KEY)
    page = staff_client.get(reverse("admin:agents_app_provider_change", args=[keyed.pk])).content.decode()
    assert 'name="api_key_clear"' in page and "清除已保存的密钥" in page and f"当前：{API_KEY_SET_TEXT}" in page
