import pytest
from django.urls import reverse
from django.utils.html import escape

from campus_agent.testing.admin_forms import admin_form_data, admin_login_required_check
from subagents_app.models import SubAgent


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
    assert (row.base_url, row.timeout_sec, row.enabled, row.tool_name) == (
        "http://course-agent:8000",
        45,
        True,
        "call_course_select",
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
