"""Admin: 内容安全 → 审核模型 (docs/safety.md#the-moderation-model). The address must be http(s),
the timeout is capped, a guard prompt must hold {text}, one model at most is enabled; the API key
is write-only and stored encrypted, as a model provider's; where the texts go is a superuser's
field."""
import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db import connection
from django.urls import reverse

from campus_agent.base.admin_secrets import KEY_BOTH_ERROR as API_KEY_BOTH_ERROR
from campus_agent.base.admin_secrets import KEY_SET_TEXT as API_KEY_SET_TEXT
from safety_app.models import (
    MODERATION_URL_ERROR,
    ONE_ENABLED_ERROR,
    PROMPT_PLACEHOLDER_ERROR,
    ModerationModel,
)

pytestmark = pytest.mark.django_db

KEY = "sk-moderation-entered-0123456789abcdef"
ADD = "admin:safety_app_moderationmodel_add"


def _form(**fields) -> dict:
    data = {"name": "Qwen3Guard", "kind": "moderations", "enabled": "on", "base_url": "http://127.0.0.1:9/v1",
            "model": "Qwen/Qwen3Guard-Gen-4B", "api_key": "", "prompt": "{text}", "question": "on",
            "timeout_sec": "5", "fail_mode": "open"}
    data.update(fields)
    return {k: v for k, v in data.items() if v is not None}


def _stored_column(pk) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT api_key_encrypted FROM safety_app_moderationmodel WHERE id = %s", [pk])
        return cursor.fetchone()[0]


def test_the_key_is_stored_encrypted_and_never_shown(staff_client):
    response = staff_client.post(reverse(ADD), _form(api_key=KEY))
    assert response.status_code == 302, response.content.decode()[:2000]
    row = ModerationModel.objects.get()

    stored = _stored_column(row.pk)
    assert stored and KEY not in stored and KEY[3:20] not in stored
    assert row.api_key_plain() == KEY
    change = reverse("admin:safety_app_moderationmodel_change", args=[row.pk])
    page = staff_client.get(change).content.decode()
    assert KEY not in page and stored not in page and f"当前：{API_KEY_SET_TEXT}" in page
    listing = staff_client.get(reverse("admin:safety_app_moderationmodel_changelist")).content.decode()
    assert KEY not in listing and API_KEY_SET_TEXT in listing

    # Blank keeps it; a new key and 清除 at once is refused; 清除 removes it.
    assert staff_client.post(change, _form(timeout_sec="7")).status_code == 302
    row.refresh_from_db()
    assert (row.timeout_sec, row.api_key_plain(), _stored_column(row.pk)) == (7, KEY, stored)
    both = staff_client.post(change, _form(api_key="sk-new", api_key_clear="on"))
    assert both.status_code == 200 and API_KEY_BOTH_ERROR in both.content.decode()
    assert staff_client.post(change, _form(api_key_clear="on")).status_code == 302
    row.refresh_from_db()
    assert (row.api_key_plain(), _stored_column(row.pk)) == ("", "")


def test_the_key_is_hidden_from_error_reports(staff_client):
    from django.views.debug import SafeExceptionReporterFilter

    response = staff_client.post(reverse(ADD), _form(api_key=KEY, name=""))
    request = response.wsgi_request
    assert list(request.sensitive_post_parameters) == ["api_key"]
    assert SafeExceptionReporterFilter().get_post_parameters(request)["api_key"] != KEY


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"base_url": "file:///etc/passwd"}, MODERATION_URL_ERROR),
        ({"base_url": "javascript:alert(1)"}, MODERATION_URL_ERROR),
        ({"base_url": "ftp://10.0.0.5/v1"}, MODERATION_URL_ERROR),
        ({"base_url": "http://"}, MODERATION_URL_ERROR),
        ({"base_url": "http://10.0.0.5/v1 x"}, MODERATION_URL_ERROR),
        ({"timeout_sec": "0"}, "确保该值大于或等于1。"),
        ({"timeout_sec": "31"}, "确保该值小于或等于30。"),
        ({"timeout_sec": "100000"}, "确保该值小于或等于30。"),
        ({"kind": "guard_chat", "prompt": "判断是否安全"}, PROMPT_PLACEHOLDER_ERROR),
        ({"kind": "other"}, "other 不在可用的选项中"),
        ({"fail_mode": "maybe"}, "maybe 不在可用的选项中"),
    ],
    ids=["file-url", "javascript-url", "ftp-url", "no-host", "space", "timeout-0", "timeout-31", "timeout-huge",
         "prompt-without-text", "kind", "fail-mode"],
)
def test_bad_values_are_form_errors(staff_client, fields, error):
    response = staff_client.post(reverse(ADD), _form(**fields))
    assert response.status_code == 200
    assert error in response.content.decode()
    assert not ModerationModel.objects.exists()


def test_one_enabled_model_at_most(staff_client):
    assert staff_client.post(reverse(ADD), _form()).status_code == 302
    second = staff_client.post(reverse(ADD), _form(name="另一个"))
    assert second.status_code == 200 and ONE_ENABLED_ERROR in second.content.decode()
    assert staff_client.post(reverse(ADD), _form(name="另一个", enabled=None)).status_code == 302
    assert ModerationModel.objects.filter(enabled=True).count() == 1


def test_where_the_texts_go_is_a_superuser_right(client, password):
    row = ModerationModel(name="审核", base_url="http://127.0.0.1:9/v1", model="m")
    row.api_key_store(KEY)
    row.save()
    editor = get_user_model().objects.create_user(username="editor", password=password, is_staff=True)
    editor.user_permissions.set(Permission.objects.filter(
        codename__in=["view_moderationmodel", "change_moderationmodel", "add_moderationmodel"]))
    client.force_login(editor)
    change = reverse("admin:safety_app_moderationmodel_change", args=[row.pk])

    response = client.post(change, _form(base_url="http://attacker.example.com/v1", fail_mode="closed"))

    assert response.status_code == 302
    row.refresh_from_db()
    assert (row.base_url, row.fail_mode, row.api_key_plain()) == ("http://127.0.0.1:9/v1", "closed", KEY)
    assert client.get(reverse(ADD)).status_code == 403


def test_the_test_action_reports_the_verdict_or_why_it_failed(staff_client, moderation_server):
    from django.contrib.messages import get_messages
    from prometheus_client import REGISTRY

    row = ModerationModel(name="审核", base_url=moderation_server.url, model="guard-test", timeout_sec=1,
                          fail_mode="closed")
    row.api_key_store(KEY)
    row.save()
    counted = REGISTRY.get_sample_value("campus_agent_moderation_model_seconds_count", {"stage": "question"})
    listing = reverse("admin:safety_app_moderationmodel_changelist")
    moderation_server.pass_().flag("violence").fail(502).garbage()

    for _ in range(4):  # the messages wait for the page that shows them: all four
        response = staff_client.post(listing, {"action": "model_test", "_selected_action": [row.pk]})
        assert response.status_code == 302
    reports = [(m.level_tag, m.message) for m in get_messages(response.wsgi_request)]

    assert [level for level, _ in reports] == ["success", "warning", "error", "error"]
    assert reports[0][1].startswith("“审核”可用：“你好”判定为通过（")
    assert reports[1][1] == "“审核”把“你好”判定为违规（violence），请检查模型和提示词。"
    assert reports[2][1] == "“审核”检查失败：HTTP 502。这时学生的问题会被拦截。"
    assert reports[3][1] == "“审核”检查失败：回答不是 JSON。这时学生的问题会被拦截。"
    assert [r.body for r in moderation_server.requests] == [{"model": "guard-test", "input": "你好"}] * 4
    assert moderation_server.last_request.headers["authorization"] == f"Bearer {KEY}"
    # A test is not a student's question: not counted.
    assert REGISTRY.get_sample_value("campus_agent_moderation_model_seconds_count", {"stage": "question"}) == counted
