"""The demo catalog (`manage.py load_demo`): what works out of the box (issue #6).

Registers the demo sub-agents (served by this server under /demo/subagents/ when DEMO_ENABLED
is on; it warns when they are not: the seed-contract canteen and course, and the A2A library agent), the demo MCP server (stdio, `python -m demo_app.mcp`),
the default agent 校园小智 using them, and two logins for local use. Rows are created only when missing (looked up by their natural keys), so
running it again changes nothing and never overwrites what staff edited in admin — with one
exception each: a demo sub-agent still pointing at a demo address (…/demo/subagents/<name>) follows
the address this server runs at now (`PORT=8765 scripts/run.sh` after a first run on 8000 left
the old port behind: every demo question failed to connect), and the demo MCP service still
starting the demo server by the module name it had before it moved into demo_app follows the new
one. It says so.

Demo logins carry well-known passwords, so they are created only where that is safe: with
DEBUG on or when ALLOWED_HOSTS names this machine only (the defaults). Elsewhere pass
--force-users to create them anyway; --no-users never creates them.
"""
import sys
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction

from agents_app.models import Agent, McpService
from agents_app.selectors import agent_default_exists
from campus_agent.base.hosts import hosts_local_only
from demo_app.mcp import DEMO_MCP_MODULE, DEMO_MCP_MODULE_BEFORE, DEMO_MCP_NAME
from demo_app.subagents.catalog import DEMO_SUBAGENTS
from demo_app.subagents.library_a2a import LIBRARY_DESCRIPTION, LIBRARY_DISPLAY, LIBRARY_EXAMPLES, LIBRARY_NAME
from subagents_app.models import SubAgent

AGENT_SLUG = "xiaozhi"
AGENT_NAME = "校园小智"
AGENT_PROMPT = """你是“校园小智”，本校学生的校园生活助手。请用简洁、友好的中文回答，信息多时用列表或表格。

你可以使用这些工具：
- call_canteen（食堂助手）：食堂菜单、菜价、热量、营业时间。
  把学生的问题（可补全食堂、餐次等信息）作为 message 传入。
- call_course（选课助手）：课程目录、任课老师、学分、上课时间地点、剩余名额。
- call_library（图书馆助手）：图书馆各馆的开放时间、考试周和节假日安排。
- campus-calendar 的工具：现在几点、今天星期几、第几教学周（current_time）；
  开学、放假、考试周、选课时间等校历安排（academic_calendar）；某一天是第几周（week_of_date）。

规则：
1. 涉及菜单、课程、日期和校历的问题，先调用工具再回答，不要凭记忆编造；工具给出的数字原样引用。
2. 子 Agent 已经给出完整答案和图表时（页面会自动展示图表），简要总结要点即可，不要整段重复。
3. 工具失败或超时，如实告诉学生并建议稍后再试，不要猜测结果。
4. 与校园生活无关或工具无法回答的问题，礼貌说明你能帮忙的范围。
5. 不要索取或复述密码、令牌等敏感信息。"""

MCP_TIMEOUT_SEC = 20
SUBAGENT_TIMEOUT_SEC = 30
DEMO_PATH = "/demo/subagents"
DEMO_DISABLED_WARNING = (
    "DEMO_ENABLED 未开启：本服务不提供 /demo/subagents/ 下的演示子 Agent，已登记的演示子 Agent 将无法调用。"
    "本机演示请设置 DEMO_ENABLED=true（scripts/run.sh 默认开启）；部署时请在后台把子 Agent 指向正式服务。"
)


@dataclass(frozen=True, slots=True)
class DemoLogin:
    username: str
    password: str
    label: str
    staff: bool


DEMO_LOGINS = (
    DemoLogin(username="student", password="student123", label="学生", staff=False),
    DemoLogin(username="admin", password="admin123", label="管理员（可进后台 /admin/）", staff=True),
)


# What students see the demo services called, and the questions the welcome offers.
DEMO_DISPLAY = {
    "canteen": ("食堂助手", "二食堂中午吃什么？\n哪个食堂的菜最便宜？\n低卡的晚饭有哪些？"),
    "course": ("选课助手", "周三有哪些通识课？\n高等数学还有名额吗？"),
}
DEMO_MCP_DISPLAY = "校历"


@dataclass
class DemoLoadReport:
    created: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)
    logins: list[tuple[DemoLogin, bool]] = field(default_factory=list)  # (login, created now)


def demo_mcp_config() -> dict:
    """Runs the demo MCP server with this interpreter: no shell, no environment beyond the stdio
    client's minimal default and the import path to the project (docs/design.md#cross-cutting-rules), and no `cwd`, so it
    starts in the dedicated empty directory, not beside `.env`."""
    return {"command": sys.executable, "args": ["-m", DEMO_MCP_MODULE], "env": {"PYTHONPATH": str(settings.BASE_DIR)}}


def demo_logins_allowed() -> bool:
    """Default passwords only on a developer machine: DEBUG, or served to this machine only."""
    return settings.DEBUG or hosts_local_only(settings.ALLOWED_HOSTS)


def demo_sub_agents_unserved(*, base_url: str) -> bool:
    """The demo sub-agents are pointed at a server's /demo/subagents while this server does not
    mount them (DEMO_ENABLED off): the rows would answer 404 until someone serves them."""
    return not settings.DEMO_ENABLED and urlsplit(base_url).path.rstrip("/").endswith(DEMO_PATH)


def demo_address(*, base_url: str, name: str) -> str:
    return f"{base_url.rstrip('/')}/{name}"


def is_demo_address(*, url: str, name: str) -> bool:
    """True for an address of a demo sub-agent served by some run of this project."""
    return urlsplit(url).path.rstrip("/").endswith(f"{DEMO_PATH}/{name}")


def _demo_address_follow(row: SubAgent, *, base_url: str, report: DemoLoadReport) -> bool:
    """A demo row left at another run's address moves to this one (True); an address staff set
    stays."""
    wanted = demo_address(base_url=base_url, name=row.name)
    if row.base_url == wanted or not is_demo_address(url=row.base_url, name=row.name):
        return False
    report.moved.append(f"地址 子 Agent {row.name}：{row.base_url} → {wanted}")
    row.base_url = wanted
    row.save(update_fields=["base_url", "updated_at"])
    return True


def _demo_mcp_follow(service: McpService, *, report: DemoLoadReport) -> bool:
    """The demo MCP service registered before the demo moved into demo_app still starts the module
    by its old name, which no longer exists: it follows (True). A command staff set stays."""
    args = service.config.get("args") if isinstance(service.config, dict) else None
    if service.protocol != McpService.Protocol.STDIO or args != ["-m", DEMO_MCP_MODULE_BEFORE]:
        return False
    service.config = {**service.config, "args": ["-m", DEMO_MCP_MODULE]}
    service.save(update_fields=["config", "updated_at"])
    report.moved.append(f"启动命令 MCP 服务 {service.name}：python -m {DEMO_MCP_MODULE_BEFORE} → python -m {DEMO_MCP_MODULE}")
    return True


def _note(report: DemoLoadReport, label: str, created: bool) -> None:
    (report.created if created else report.kept).append(label)


@transaction.atomic
def demo_catalog_load(*, base_url: str, with_logins: bool) -> DemoLoadReport:
    """Creates what is missing of the demo catalog; returns what it created and what it kept."""
    report = DemoLoadReport()
    sub_agents = []
    for demo in DEMO_SUBAGENTS.values():
        display_name, examples = DEMO_DISPLAY.get(demo.name, ("", ""))
        row, created = SubAgent.objects.get_or_create(
            name=demo.name,
            defaults={
                "description": demo.description,
                "display_name": display_name,
                "example_questions": examples,
                "base_url": demo_address(base_url=base_url, name=demo.name),
                "domain": demo.domain,
                "timeout_sec": SUBAGENT_TIMEOUT_SEC,
            },
        )
        moved = not created and _demo_address_follow(row, base_url=base_url, report=report)
        sub_agents.append(row)
        if not moved:
            _note(report, f"子 Agent {row.name}（{row.base_url}）", created)

    # The demo A2A agent (demo_app/subagents/library_a2a.py), served under the same prefix.
    library, library_created = SubAgent.objects.get_or_create(
        name=LIBRARY_NAME,
        defaults={
            "protocol": SubAgent.Protocol.A2A,
            "description": LIBRARY_DESCRIPTION,
            "display_name": LIBRARY_DISPLAY,
            "example_questions": LIBRARY_EXAMPLES,
            "base_url": demo_address(base_url=base_url, name=LIBRARY_NAME),
            "timeout_sec": SUBAGENT_TIMEOUT_SEC,
        },
    )
    sub_agents.append(library)
    if library_created or not _demo_address_follow(library, base_url=base_url, report=report):
        _note(report, f"子 Agent {library.name}（A2A，{library.base_url}）", library_created)

    service, created = McpService.objects.get_or_create(
        name=DEMO_MCP_NAME,
        defaults={
            "protocol": McpService.Protocol.STDIO,
            "config": demo_mcp_config(),
            "timeout_sec": MCP_TIMEOUT_SEC,
            "display_name": DEMO_MCP_DISPLAY,
        },
    )
    if created or not _demo_mcp_follow(service, report=report):
        _note(report, f"MCP 服务 {service.name}", created)

    agent, created = Agent.objects.get_or_create(
        slug=AGENT_SLUG,
        defaults={
            "name": AGENT_NAME,
            "system_prompt": AGENT_PROMPT,
            # Staff may already have chosen another default agent: keep their choice.
            "is_default": not agent_default_exists(),
        },
    )
    if created:  # links only on creation: a tool staff removed later stays removed
        agent.sub_agents.set(sub_agents)
        agent.mcp_services.set([service])
    elif library_created:  # a catalog loaded before the A2A demo existed gets it too
        agent.sub_agents.add(library)
    _note(report, f"智能体 {agent.name}（{agent.slug}）", created)

    if with_logins:
        users = get_user_model()
        for login in DEMO_LOGINS:
            user, created = users.objects.get_or_create(
                username=login.username, defaults={"is_staff": login.staff, "is_superuser": login.staff}
            )
            if created:
                user.set_password(login.password)
                user.save(update_fields=["password"])
            report.logins.append((login, created))
    return report


