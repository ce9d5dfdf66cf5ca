import pytest
from django.contrib import admin
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import RequestFactory
from django.urls import reverse
from django.utils.html import escape

from subagents_app.models import SubAgent
from testkit.web.admin_forms import admin_form_data, admin_login_required_check


def pages(canteen: SubAgent) -> list[str]:
    return [
        reverse("admin:subagents_app_subagent_changelist"),
        reverse("admin:subagents_app_subagent_add"),
        reverse("admin:subagents_app_subagent_change", args=[canteen.pk]),
    ]


@pytest.mark.django_db
def test_staff_sees_the_sub_agent_pages(staff_client, canteen):
    for url in pages(canteen):
        assert staff_client.get(url).status_code == 200, url
    listing = staff_client.get(pages(canteen)[0]).content.decode()
    assert "canteen" in listing and "http://canteen-agent:8000" in listing


@pytest.mark.django_db
def test_change_page_tells_staff_the_description_drives_the_model(staff_client, canteen):
    html = staff_client.get(reverse("admin:subagents_app_subagent_change", args=[canteen.pk])).content.decode()
    for field in ("name", "description", "base_url", "timeout_sec"):
        assert SubAgent._meta.get_field(field).help_text in html, field  # admin renders help text as is
    assert "关键词" in SubAgent._meta.get_field("description").help_text


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["student", "anonymous"])
def test_non_staff_are_sent_to_the_admin_login(client, user, canteen, who):
    if who == "student":
        client.force_login(user)
    admin_login_required_check(client, pages(canteen))


@pytest.mark.django_db
def test_staff_adds_a_sub_agent_with_a_service_host_url(staff_client):
    url = reverse("admin:subagents_app_subagent_add")
    data = admin_form_data(
        staff_client.get(url),
        name="course-select",
        description="选课助手。关键词：选课、课程、学分",
        base_url="http://course-agent:8000",
        domain="course",
        timeout_sec=45,
    )

    response = staff_client.post(url, data)

    assert response.status_code == 302
    row = SubAgent.objects.get(name="course-select")
    assert (row.base_url, row.timeout_sec, row.enabled) == (
        "http://course-agent:8000",
        45,
        True,
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    "field, value, message",
    [
        ("name", "Course_Select", "名称须以小写字母开头，只含小写字母、数字和连字符，2–63 个字符。"),
        ("base_url", "ftp://course.example.edu.cn", "服务地址须是 http:// 或 https:// 开头的完整地址"),
        ("timeout_sec", 301, "300"),
        ("timeout_sec", 0, "1"),
        ("description", "   ", "必填"),  # the form strips blanks: required
    ],
)
def test_admin_refuses_bad_values_with_a_message(staff_client, field, value, message):
    url = reverse("admin:subagents_app_subagent_add")
    good = {"name": "course-select", "description": "选课", "base_url": "http://course-agent:8000"}
    data = admin_form_data(staff_client.get(url), **{**good, field: value})

    response = staff_client.post(url, data)

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == [field]
    assert message in errors[field][0]
    assert escape(errors[field][0]) in response.content.decode()
    assert not SubAgent.objects.exists()


# --- The base URL receives students' campus tokens: a superuser right (issue 9) ---------------

ELSEWHERE = "http://collector.example.com:8000"


def change_url(sub_agent: SubAgent) -> str:
    return reverse("admin:subagents_app_subagent_change", args=[sub_agent.pk])


@pytest.mark.django_db
def test_editor_sees_the_base_url_read_only(editor_client, canteen):
    page = editor_client.get(change_url(canteen))
    assert page.status_code == 200
    form = page.context["adminform"].form
    assert "base_url" not in form.fields
    assert {"description", "domain", "timeout_sec", "enabled"} <= set(form.fields)  # the rest stays editable
    html = page.content.decode()
    assert 'name="base_url"' not in html and "http://canteen-agent:8000" in html
    help_text = SubAgent._meta.get_field("base_url").help_text  # why it is read-only
    assert "只有超级管理员可以修改" in help_text and help_text in html


@pytest.mark.django_db
def test_editor_cannot_redirect_campus_tokens_by_post(editor_client, canteen):
    data = admin_form_data(editor_client.get(change_url(canteen)), timeout_sec=40, base_url=ELSEWHERE)

    response = editor_client.post(change_url(canteen), data)

    assert response.status_code == 302
    canteen.refresh_from_db()
    assert canteen.timeout_sec == 40  # the POST was taken …
    assert canteen.base_url == "http://canteen-agent:8000"  # … without the field it smuggled in


@pytest.mark.django_db
def test_editor_cannot_add_a_sub_agent_even_with_the_add_permission(editor_client, editor_user):
    editor_user.user_permissions.add(Permission.objects.get(codename="add_subagent"))
    url = reverse("admin:subagents_app_subagent_add")
    data = {"name": "collector", "description": "食堂", "base_url": ELSEWHERE, "timeout_sec": "30", "enabled": "on"}

    assert editor_client.get(url).status_code == 403
    assert editor_client.post(url, data).status_code == 403
    assert not SubAgent.objects.exists()


@pytest.mark.django_db
def test_superuser_changes_the_base_url_and_the_history_names_the_field(staff_client, staff_user, canteen):
    data = admin_form_data(staff_client.get(change_url(canteen)), base_url="http://canteen-agent-2:8000")

    response = staff_client.post(change_url(canteen), data)

    assert response.status_code == 302
    canteen.refresh_from_db()
    assert canteen.base_url == "http://canteen-agent-2:8000"
    entry = LogEntry.objects.get(object_id=str(canteen.pk), action_flag=CHANGE)
    assert entry.user == staff_user and "服务地址" in entry.get_change_message()
    history = staff_client.get(reverse("admin:subagents_app_subagent_history", args=[canteen.pk]))
    assert "服务地址" in history.content.decode()


def test_no_admin_path_edits_sub_agents_without_the_change_form():
    """No list_editable (it would save fields past get_readonly_fields); the health check and the
    Agent Card action only read."""
    request = RequestFactory().get("/")
    request.user = get_user_model()(is_staff=True, is_superuser=True, is_active=True)
    model_admin = admin.site._registry[SubAgent]
    assert not model_admin.list_editable
    assert set(model_admin.get_actions(request)) == {"delete_selected", "health_check", "show_agent_card"}


@pytest.mark.django_db
def test_saving_a_sub_agent_no_agent_uses_says_how_to_offer_it(staff_client):
    """Issue 20 (15): saved is not offered; staff expected the model to see it."""
    from subagents_app.admin import NOT_OFFERED_TEXT

    url = reverse("admin:subagents_app_subagent_add")
    data = admin_form_data(staff_client.get(url), name="notice", description="通知助手。关键词：通知、公告",
                           base_url="http://notice-agent:8000", domain="notice", timeout_sec=30)
    response = staff_client.post(url, data, follow=True)
    shown = [str(m) for m in response.context["messages"]]
    assert NOT_OFFERED_TEXT.format(name="notice") in shown


@pytest.mark.django_db
def test_saving_a_sub_agent_an_agent_uses_needs_no_hint(staff_client, canteen):
    from agents_app.models import Agent
    from subagents_app.admin import NOT_OFFERED_TEXT

    Agent.objects.create(slug="xiaozhi", name="小智", is_default=True).sub_agents.add(canteen)
    url = reverse("admin:subagents_app_subagent_change", args=[canteen.pk])
    response = staff_client.post(url, admin_form_data(staff_client.get(url), timeout_sec=20), follow=True)
    assert NOT_OFFERED_TEXT.format(name="canteen") not in [str(m) for m in response.context["messages"]]
