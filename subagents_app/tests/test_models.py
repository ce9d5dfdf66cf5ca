import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from subagents_app.models import SubAgent


def make(**overrides) -> SubAgent:
    values = {"name": "canteen", "description": "食堂菜单。关键词：食堂、吃什么", "base_url": "http://canteen-agent:8000"}
    return SubAgent(**{**values, **overrides})


def errors_of(agent: SubAgent) -> dict:
    with pytest.raises(ValidationError) as info:
        agent.full_clean()
    return info.value.message_dict


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["ab", "canteen", "course-select", "a1-2-3", "a" + "b" * 62])
def test_name_pattern_accepts(name):
    make(name=name).full_clean()


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["a", "Canteen", "1canteen", "-canteen", "can_teen", "can teen", "食堂", "a" + "b" * 63])
def test_name_pattern_rejects(name):
    assert "name" in errors_of(make(name=name))


@pytest.mark.django_db
def test_name_error_message_explains_the_rule():
    assert errors_of(make(name="Bad_Name"))["name"] == ["名称须以小写字母开头，只含小写字母、数字和连字符，2–63 个字符。"]


@pytest.mark.django_db
def test_name_is_unique(db):
    make().save()
    assert "name" in errors_of(make())
    with pytest.raises(IntegrityError), transaction.atomic():
        SubAgent.objects.create(name="canteen", description="x", base_url="http://x:1")


@pytest.mark.django_db
@pytest.mark.parametrize("timeout", [1, 30, 300])
def test_timeout_in_range(timeout):
    make(timeout_sec=timeout).full_clean()


@pytest.mark.django_db
@pytest.mark.parametrize("timeout", [0, 301, 1000])
def test_timeout_out_of_range_rejected_by_clean(timeout):
    assert "timeout_sec" in errors_of(make(timeout_sec=timeout))


@pytest.mark.django_db
@pytest.mark.parametrize("timeout", [0, 301])
def test_timeout_range_is_a_database_check_constraint(timeout):
    row = make()
    row.save()
    # A queryset update skips full_clean(): only the CHECK constraint stands in the way.
    with pytest.raises(IntegrityError), transaction.atomic():
        SubAgent.objects.filter(pk=row.pk).update(timeout_sec=timeout)
    row.refresh_from_db()
    assert row.timeout_sec == 30


@pytest.mark.django_db
def test_default_timeout_is_thirty_seconds():
    assert make().timeout_sec == 30


@pytest.mark.django_db
@pytest.mark.parametrize(
    "url",
    ["http://canteen-agent:8000", "https://jwc.example.edu.cn/agents/", "http://127.0.0.1:9101", "http://localhost:8000"],
)
def test_base_url_accepts_http_urls_including_single_label_service_hosts(url):
    make(base_url=url).full_clean()


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["ftp://files.example.edu.cn", "canteen-agent:8000", "http://", "http://bad host/", ""])
def test_base_url_rejects_non_http_urls(url):
    assert "base_url" in errors_of(make(base_url=url))


@pytest.mark.django_db
@pytest.mark.parametrize("description", ["", "   \n "])
def test_description_is_required(description):
    assert "description" in errors_of(make(description=description))


def test_description_help_text_tells_staff_about_trigger_keywords():
    help_text = SubAgent._meta.get_field("description").help_text
    assert "模型" in help_text and "关键词" in help_text
