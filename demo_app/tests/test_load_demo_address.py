"""`load_demo` after the server moved (issue 13): demo sub-agents follow the running address and
say so; an address staff set is kept; demo rows carry the names and questions the page shows."""
from io import StringIO

import pytest
from django.core.management import call_command

from agents_app.models import McpService
from demo_app.catalog import DEMO_DISPLAY
from subagents_app.models import SubAgent

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]


@pytest.fixture(autouse=True)
def fast_hasher(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def load_demo(settings, port: int) -> str:
    settings.DEMO_BASE_URL = f"http://127.0.0.1:{port}/demo/subagents"
    out = StringIO()
    call_command("load_demo", "--no-users", stdout=out)
    return out.getvalue()


def test_demo_sub_agents_follow_the_running_address_and_say_so(settings):
    load_demo(settings, 8000)
    out = load_demo(settings, 8765)

    assert dict(SubAgent.objects.values_list("name", "base_url")) == {
        "canteen": "http://127.0.0.1:8765/demo/subagents/canteen",
        "course": "http://127.0.0.1:8765/demo/subagents/course",
        "library": "http://127.0.0.1:8765/demo/subagents/library",
    }
    assert ("已更新地址 子 Agent canteen：http://127.0.0.1:8000/demo/subagents/canteen → "
            "http://127.0.0.1:8765/demo/subagents/canteen") in out
    assert "已存在，未改动 子 Agent canteen" not in out
    again = load_demo(settings, 8765)
    assert "已更新地址" not in again and "已存在，未改动 子 Agent canteen（http://127.0.0.1:8765/" in again


def test_an_address_staff_set_is_kept(settings):
    load_demo(settings, 8000)
    SubAgent.objects.filter(name="canteen").update(base_url="http://canteen-agent:8000")
    out = load_demo(settings, 8765)
    assert SubAgent.objects.get(name="canteen").base_url == "http://canteen-agent:8000"
    assert SubAgent.objects.get(name="course").base_url == "http://127.0.0.1:8765/demo/subagents/course"
    assert "canteen-agent" not in out.split("已存在")[0]  # not reported as moved


def test_demo_rows_carry_display_names_and_example_questions(settings):
    load_demo(settings, 8000)
    canteen = SubAgent.objects.get(name="canteen")
    assert canteen.display_name == DEMO_DISPLAY["canteen"][0] == "食堂助手"
    assert canteen.example_question_list[0] == "二食堂中午吃什么？"
    assert McpService.objects.get().display_name == "校历"


def test_a_demo_mcp_service_naming_the_old_module_follows_and_one_staff_changed_stays(settings):
    load_demo(settings, 8000)
    service = McpService.objects.get()
    service.config = {**service.config, "args": ["-m", "agents_app.demo_mcp"]}  # a catalog loaded before the move
    service.save()
    out = load_demo(settings, 8000)
    assert McpService.objects.get().config["args"] == ["-m", "demo_app.mcp"]
    assert "已更新启动命令 MCP 服务 campus-calendar：python -m agents_app.demo_mcp → python -m demo_app.mcp" in out

    McpService.objects.update(config={**service.config, "args": ["-m", "my_campus.calendar"]})
    out = load_demo(settings, 8000)
    assert McpService.objects.get().config["args"] == ["-m", "my_campus.calendar"]
    assert "已存在，未改动 MCP 服务 campus-calendar" in out
