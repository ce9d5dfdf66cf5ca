"""`manage.py load_demo`: the out-of-the-box catalog, idempotent and respectful of staff edits."""
import json
from io import StringIO

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from agents_app.models import Agent, McpService
from agents_app.runtime.fallback import UNCONFIGURED_NOTICE
from demo_app.catalog import (
    AGENT_SLUG,
    DEMO_DISABLED_WARNING,
    DEMO_LOGINS,
    demo_mcp_config,
)
from demo_app.mcp import DEMO_MCP_NAME
from demo_app.subagents.canteen import canteen_answer
from demo_app.subagents.catalog import DEMO_SUBAGENTS
from demo_app.subagents.library_a2a import LIBRARY_DESCRIPTION, LIBRARY_NAME, library_answer_parts
from subagents_app.models import SubAgent

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]


@pytest.fixture(autouse=True)
def fast_hasher(settings):
    # PBKDF2's deliberate slowness would dominate these tests; hashing itself is Django's job.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def load_demo(*args) -> str:
    out = StringIO()
    call_command("load_demo", *args, stdout=out)
    return out.getvalue()


def counts() -> dict[str, int]:
    return {
        "sub_agents": SubAgent.objects.count(),
        "mcp_services": McpService.objects.count(),
        "agents": Agent.objects.count(),
        "agent_sub_agents": Agent.sub_agents.through.objects.count(),
        "agent_mcp_services": Agent.mcp_services.through.objects.count(),
        "users": get_user_model().objects.count(),
    }


def snapshot() -> list:
    rows = [SubAgent.objects.values(), McpService.objects.values(), Agent.objects.values(),
            get_user_model().objects.values("username", "password", "is_staff", "is_superuser")]
    return [sorted(map(str, query)) for query in rows]


def test_registers_a_working_catalog(settings):
    settings.DEMO_BASE_URL = "http://127.0.0.1:8123/demo/subagents/"
    out = load_demo()

    agent = Agent.objects.get(slug=AGENT_SLUG)
    assert agent.is_default and agent.enabled
    assert agent.name in out
    assert sorted(agent.sub_agents.values_list("name", flat=True)) == sorted([*DEMO_SUBAGENTS, LIBRARY_NAME])
    assert list(agent.mcp_services.values_list("name", flat=True)) == [DEMO_MCP_NAME]
    for row in SubAgent.objects.all():
        assert row.base_url == f"http://127.0.0.1:8123/demo/subagents/{row.name}"
        if row.name == LIBRARY_NAME:
            assert (row.protocol, row.description) == (SubAgent.Protocol.A2A, LIBRARY_DESCRIPTION)
        else:
            assert (row.protocol, row.description) == (SubAgent.Protocol.CAMPUS_SSE, DEMO_SUBAGENTS[row.name].description)
        row.full_clean()  # what admin would accept
    service = McpService.objects.get(name=DEMO_MCP_NAME)
    assert (service.protocol, service.config) == ("stdio", demo_mcp_config())
    assert "cwd" not in service.config  # it starts in the dedicated empty directory, not beside .env
    service.full_clean()
    agent.full_clean()
    # the prompt names every tool it is given
    for name in ("call_canteen", "call_course", "call_library", "current_time", "academic_calendar", "week_of_date"):
        assert name in agent.system_prompt


def test_creates_the_demo_logins_and_prints_them():
    out = load_demo()
    users = get_user_model()
    for login in DEMO_LOGINS:
        user = users.objects.get(username=login.username)
        assert user.check_password(login.password)
        assert (user.is_staff, user.is_superuser) == (login.staff, login.staff)
        assert f"{login.username} / {login.password}" in out


def test_running_twice_changes_nothing():
    load_demo()
    before_counts, before_rows = counts(), snapshot()
    out = load_demo()
    assert counts() == before_counts
    assert snapshot() == before_rows
    assert "已创建" not in out and "密码未改动" in out


def test_staff_edits_survive_a_rerun():
    load_demo()
    canteen = SubAgent.objects.get(name="canteen")
    canteen.description, canteen.base_url = "食堂（学校正式服务）", "http://canteen-agent:8000"
    canteen.save()
    agent = Agent.objects.get(slug=AGENT_SLUG)
    agent.system_prompt = "教务处改过的提示词"
    agent.save()
    agent.sub_agents.remove(SubAgent.objects.get(name="course"))
    admin = get_user_model().objects.get(username="admin")
    admin.set_password("a-new-strong-password")
    admin.save()

    load_demo()

    canteen.refresh_from_db()
    agent.refresh_from_db()
    admin.refresh_from_db()
    assert (canteen.description, canteen.base_url) == ("食堂（学校正式服务）", "http://canteen-agent:8000")
    assert agent.system_prompt == "教务处改过的提示词"
    assert sorted(agent.sub_agents.values_list("name", flat=True)) == ["canteen", LIBRARY_NAME]
    assert admin.check_password("a-new-strong-password")


def test_keeps_another_default_agent(agent_factory):
    agent_factory(slug="campus", name="学校自己的智能体", is_default=True)
    load_demo()
    assert Agent.objects.get(is_default=True).slug == "campus"
    assert not Agent.objects.get(slug=AGENT_SLUG).is_default


def test_no_users_flag_creates_no_logins():
    load_demo("--no-users")
    assert get_user_model().objects.count() == 0
    assert SubAgent.objects.count() == len(DEMO_SUBAGENTS) + 1  # and the A2A library agent


def test_no_default_passwords_on_a_public_host_unless_forced(settings):
    settings.DEBUG = False
    settings.ALLOWED_HOSTS = ["xiaozhi.example.edu.cn"]
    out = load_demo()
    assert get_user_model().objects.count() == 0
    assert "未创建默认密码的演示账号" in out
    assert Agent.objects.filter(slug=AGENT_SLUG).exists()  # the catalog itself is still loaded

    load_demo("--force-users")
    assert get_user_model().objects.count() == len(DEMO_LOGINS)


@pytest.mark.parametrize(
    ("enabled", "base_url", "warned"),
    [
        (False, "http://127.0.0.1:8000/demo/subagents", True),
        (False, "https://xiaozhi.example.edu.cn/demo/subagents/", True),
        (True, "http://127.0.0.1:8000/demo/subagents", False),
        (False, "http://demo-agents.internal:9000/agents", False),  # served by something else
    ],
)
def test_warns_when_the_demo_sub_agents_it_registers_are_not_served(settings, enabled, base_url, warned):
    settings.DEMO_ENABLED, settings.DEMO_BASE_URL = enabled, base_url
    out = load_demo("--no-users")
    assert (DEMO_DISABLED_WARNING in out) is warned
    assert SubAgent.objects.count() == len(DEMO_SUBAGENTS) + 1  # and the A2A library agent  # registered all the same


@pytest.mark.django_db(transaction=True)
def test_the_demo_in_a_minute(settings, live_asgi):
    """A fresh install with no model: load_demo, log in as the demo student, ask the chat API."""
    settings.LLM_BASE_URL = ""
    settings.DEMO_BASE_URL = f"{live_asgi}/demo/subagents"
    load_demo()
    login = httpx.post(f"{live_asgi}/api/v1/auth/token", json={"username": "student", "password": "student123"})
    headers = {"Authorization": f"Bearer {login.json()['access_token']}"}
    question = "二食堂晚饭吃什么"

    with httpx.stream("POST", f"{live_asgi}/api/v1/chat", json={"message": question}, headers=headers,
                      timeout=20) as response:
        assert response.status_code == 200
        raw = "".join(response.iter_text())
    # Frames after `session` carry an `id:` line (docs/design.md#runs) before their `data:` line.
    frames = [json.loads(block.partition("data: ")[2]) for block in raw.split("\n\n") if "data: " in block]

    expected = canteen_answer(message=question)
    notice = UNCONFIGURED_NOTICE.format(tool="食堂助手（演示）")  # the keyless demo: no model configured
    chunks = [f for f in frames if f["type"] == "chunk"]
    # (deltas within 25 ms of each other may share a frame: compare the text, not the frames)
    assert "".join(c["content"] for c in chunks) == notice + expected.full_text
    assert all(c["fallback"] is True for c in chunks)
    assert next(f for f in frames if f["type"] == "tool_call")["tool"] == "call_canteen"
    # Keyword mode: the sub-agent's live text is the answer, streamed as chunks (issue 20 point 13).
    assert not [f for f in frames if f["type"] == "tool_chunk"]
    assert next(f for f in frames if f["type"] == "tool_result")["ok"] is True
    done = frames[-1]
    assert (done["type"], done["fallback"], done["full_text"]) == ("done", True, notice + expected.full_text)
    assert done["chart"] == expected.chart


@pytest.mark.django_db(transaction=True)
def test_the_demo_a2a_library_agent_answers_through_this_server(settings, live_asgi):
    """The A2A demo agent load_demo registers is served by this same server (campus_agent/asgi.py)
    and answers a keyword-routed question, streamed as tool chunks."""
    settings.LLM_BASE_URL = ""
    settings.DEMO_BASE_URL = f"{live_asgi}/demo/subagents"
    load_demo()
    card = httpx.get(f"{live_asgi}/demo/subagents/library/.well-known/agent-card.json").json()
    assert card["capabilities"]["streaming"] is True
    assert card["supportedInterfaces"][0]["url"] == f"{live_asgi}/demo/subagents/library/"
    login = httpx.post(f"{live_asgi}/api/v1/auth/token", json={"username": "student", "password": "student123"})
    headers = {"Authorization": f"Bearer {login.json()['access_token']}"}
    question = "图书馆几点关门"

    with httpx.stream("POST", f"{live_asgi}/api/v1/chat", json={"message": question}, headers=headers,
                      timeout=20) as response:
        raw = "".join(response.iter_text())
    frames = [json.loads(block.partition("data: ")[2]) for block in raw.split("\n\n") if "data: " in block]

    assert next(f for f in frames if f["type"] == "tool_call")["tool"] == "call_library"
    streamed = "".join(f["content"] for f in frames if f["type"] == "chunk")  # keyword mode: as the answer
    assert streamed.endswith("".join(library_answer_parts(question)))
    assert next(f for f in frames if f["type"] == "tool_result")["ok"] is True
    assert "总馆：工作日 8:00–22:30" in frames[-1]["full_text"]
