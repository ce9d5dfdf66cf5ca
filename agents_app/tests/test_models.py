import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.test import override_settings

from agents_app.models import Agent, McpService
from subagents_app.models import SubAgent


def errors_of(obj) -> dict:
    with pytest.raises(ValidationError) as info:
        obj.full_clean()
    return info.value.message_dict


def stdio(**config) -> McpService:
    return McpService(name="calendar", protocol="stdio", config=config)


def http(protocol: str = "streamable-http", **config) -> McpService:
    return McpService(name="calendar", protocol=protocol, config=config)


# --- McpService config, per protocol ---------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    "service",
    [
        stdio(command="python", args=["-m", "calendar_server"]),
        stdio(command="/usr/bin/node", args=[], env={"TZ": "Asia/Shanghai"}, cwd="/srv/mcp"),
        stdio(command="uvx"),  # args may be left out
        http(url="https://mcp.example.edu.cn/mcp"),
        http(protocol="sse", url="http://127.0.0.1:9000/sse", headers={"X-Api-Key": "k"}),
    ],
    ids=["stdio", "stdio-full", "stdio-no-args", "streamable-http", "sse-headers"],
)
def test_usable_configs_pass(service):
    service.full_clean()


STDIO_ERRORS = {
    "no command": ({"args": ["x"]}, "stdio 需要 “command”：要运行的程序，字符串，如 \"python\"。"),
    "blank command": ({"command": "  "}, "stdio 需要 “command”"),
    "command as list": ({"command": ["python", "-m", "x"]}, "stdio 需要 “command”"),
    "args as string": ({"command": "python", "args": "-m x"}, "“args” 必须是字符串列表，如 [\"-m\", \"my_server\"]。"),
    "args with a number": ({"command": "python", "args": ["-p", 8000]}, "“args” 必须是字符串列表"),
    "env not strings": ({"command": "python", "env": {"PORT": 8000}}, "“env” 必须是字符串到字符串的对象"),
    "cwd not a string": ({"command": "python", "cwd": 1}, "“cwd” 必须是目录路径字符串。"),
    "unknown key": ({"command": "python", "shell": True}, "不认识的键：shell。"),
    "http key on stdio": ({"command": "python", "url": "http://x"}, "不认识的键：url。"),
}


@pytest.mark.django_db
@pytest.mark.parametrize("config, message", STDIO_ERRORS.values(), ids=STDIO_ERRORS.keys())
def test_stdio_config_errors_say_what_to_fix(config, message):
    errors = errors_of(stdio(**config))["config"]
    assert any(message in e for e in errors), errors


HTTP_ERRORS = {
    "no url": ("streamable-http", {}, "streamable-http 需要 “url”：http:// 或 https:// 开头的地址。"),
    "ftp url": ("sse", {"url": "ftp://mcp.example.edu.cn"}, "sse 需要 “url”"),
    "url without host": ("sse", {"url": "http://"}, "sse 需要 “url”"),
    "url as list": ("streamable-http", {"url": ["http://a"]}, "streamable-http 需要 “url”"),
    "headers not strings": ("sse", {"url": "http://a:1", "headers": {"X": 1}}, "“headers” 必须是字符串到字符串的对象"),
    "stdio key on http": ("sse", {"url": "http://a:1", "command": "python"}, "不认识的键：command。"),
}


@pytest.mark.django_db
@pytest.mark.parametrize("protocol, config, message", HTTP_ERRORS.values(), ids=HTTP_ERRORS.keys())
def test_http_config_errors_say_what_to_fix(protocol, config, message):
    errors = errors_of(http(protocol=protocol, **config))["config"]
    assert any(message in e for e in errors), errors


@pytest.mark.django_db
def test_config_must_be_an_object():
    assert errors_of(McpService(name="x", protocol="stdio", config=["python"]))["config"] == ["连接配置必须是 JSON 对象。"]


@pytest.mark.django_db
def test_all_config_problems_are_listed_together():
    errors = errors_of(stdio(args="x", env=[], foo=1))["config"]
    assert len(errors) == 4  # command, args, env, unknown key


@pytest.mark.django_db
def test_unknown_protocol_is_refused_by_clean_and_by_the_database():
    assert "protocol" in errors_of(McpService(name="x", protocol="websocket", config={"url": "http://a:1"}))
    service = McpService.objects.create(name="calendar", protocol="stdio", config={"command": "python"})
    with pytest.raises(IntegrityError), transaction.atomic():
        McpService.objects.filter(pk=service.pk).update(protocol="websocket")


@pytest.mark.django_db
@pytest.mark.parametrize("timeout", [0, 301])
def test_mcp_timeout_range_in_clean_and_database(timeout):
    assert "timeout_sec" in errors_of(McpService(name="x", config={"command": "python"}, timeout_sec=timeout))
    service = McpService.objects.create(name="calendar", protocol="stdio", config={"command": "python"})
    with pytest.raises(IntegrityError), transaction.atomic():
        McpService.objects.filter(pk=service.pk).update(timeout_sec=timeout)


# --- Agent -----------------------------------------------------------------------------------


@pytest.fixture
def default_agent(db) -> Agent:
    return Agent.objects.create(slug="xiaozhi", name="校园小智", is_default=True)


@pytest.mark.django_db
def test_second_default_agent_is_refused_by_clean(default_agent):
    errors = errors_of(Agent(slug="other", name="另一个", is_default=True))
    assert errors["is_default"] == ["已有默认智能体“校园小智”，请先取消它的默认。"]


@pytest.mark.django_db
def test_the_default_agent_itself_still_validates(default_agent):
    default_agent.full_clean()  # the "other defaults" check must exclude the row being edited


@pytest.mark.django_db
def test_second_default_agent_is_refused_by_the_database(default_agent):
    with pytest.raises(IntegrityError), transaction.atomic():
        Agent.objects.create(slug="other", name="另一个", is_default=True)
    other = Agent.objects.create(slug="other", name="另一个")
    with pytest.raises(IntegrityError), transaction.atomic():
        Agent.objects.filter(pk=other.pk).update(is_default=True)
    assert list(Agent.objects.filter(is_default=True)) == [default_agent]


@pytest.mark.django_db
def test_many_non_default_agents_are_fine(default_agent):
    for slug in ("a", "b", "c"):
        Agent.objects.create(slug=slug, name=slug)
    assert Agent.objects.count() == 4


@pytest.mark.django_db
def test_default_agent_must_be_enabled(db):
    assert errors_of(Agent(slug="x", name="x", is_default=True, enabled=False))["enabled"] == ["默认智能体必须启用。"]


@pytest.mark.django_db
@pytest.mark.parametrize("field, value", [("temperature", -0.1), ("temperature", 2.5), ("max_tool_rounds", 0), ("max_tool_rounds", 21)])
def test_agent_ranges_in_clean_and_database(field, value):
    assert field in errors_of(Agent(slug="x", name="x", **{field: value}))
    agent = Agent.objects.create(slug="x", name="x")
    with pytest.raises(IntegrityError), transaction.atomic():
        Agent.objects.filter(pk=agent.pk).update(**{field: value})


@pytest.mark.django_db
def test_slug_is_unique(default_agent):
    assert "slug" in errors_of(Agent(slug="xiaozhi", name="重复"))


@pytest.mark.django_db
@override_settings(LLM_MODEL="qwen-max")
def test_blank_model_means_the_settings_default():
    assert Agent(slug="x", name="x").effective_model == "qwen-max"
    assert Agent(slug="x", name="x", model="deepseek-v3").effective_model == "deepseek-v3"


@pytest.mark.django_db
def test_agent_tools_are_many_to_many(default_agent):
    service = McpService.objects.create(name="calendar", config={"command": "python"})
    sub = SubAgent.objects.create(name="canteen", description="食堂", base_url="http://canteen-agent:8000")
    default_agent.mcp_services.add(service)
    default_agent.sub_agents.add(sub)
    assert list(service.agents.all()) == [default_agent]
    assert list(sub.agents.all()) == [default_agent]
    # Deleting a tool detaches it; the agent stays.
    sub.delete()
    assert Agent.objects.get(pk=default_agent.pk).sub_agents.count() == 0


@pytest.mark.django_db
def test_default_agent_orders_first(default_agent):
    Agent.objects.create(slug="a", name="阿")
    assert Agent.objects.first() == default_agent
