import re

from subagents_app.models import SubAgent
from testkit.web.admin_forms import admin_action_run


def run_health_check(client, *sub_agents) -> list[tuple[str, str]]:
    return admin_action_run(client, changelist="admin:subagents_app_subagent_changelist", action="health_check",
                            objects=sub_agents)


def test_health_check_reports_a_healthy_sub_agent(staff_client, sub_agent):
    [(level, text)] = run_health_check(staff_client, sub_agent)
    assert level == "success"
    assert re.fullmatch(r"子 Agent canteen：正常（HTTP 200，\d+ ms）", text)


def test_health_check_names_each_failure(staff_client, subagent_server, unused_tcp_port, db):
    no_health = SubAgent.objects.create(  # reachable, but /healthz is not served under this prefix
        name="notice", description="通知公告", base_url=f"{subagent_server.url}/elsewhere", domain="notice"
    )
    down = SubAgent.objects.create(
        name="library", description="图书馆", base_url=f"http://127.0.0.1:{unused_tcp_port}", domain="library"
    )
    messages = run_health_check(staff_client, no_health, down)
    assert messages == [
        ("error", "子 Agent library：无法连接（ConnectError）"),
        ("error", "子 Agent notice：可以连接，但 /healthz 返回 HTTP 404"),
    ]
