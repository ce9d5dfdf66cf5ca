"""Which tools ask a person first (docs/design.md#runs, issue 12): the policy of sub-agents and MCP tools,
a trusted service's annotations as defaults, `never` tools not offered, keyword routing never
calling a tool that asks. The run's pause and resume: chat_app/tests/runs/test_approvals.py."""
import pytest
from asgiref.sync import async_to_sync
from django.core.exceptions import ValidationError

from agents_app.access import EVERYONE
from agents_app.models import McpService
from agents_app.runtime.fallback import tool_fallback_args
from agents_app.runtime.tools import tools_for_agent

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(
    ("trusted", "per_tool", "default", "read_only", "destructive", "expected"),
    [
        (False, None, "auto", None, True, "auto"),  # an untrusted server's hints decide nothing
        (False, None, "ask", True, None, "ask"),
        (True, None, "auto", None, True, "ask"),  # destructiveHint → ask
        (True, None, "ask", True, None, "auto"),  # readOnlyHint → auto
        (True, None, "never", None, None, "never"),  # no hint: the service's default
        (True, "auto", "ask", None, True, "auto"),  # staff's per-tool setting wins over the hints
        (False, "never", "auto", True, None, "never"),
        (True, "bogus", "ask", None, None, "ask"),  # a value that is no policy is ignored
    ],
)
def test_an_mcp_tools_policy(trusted, per_tool, default, read_only, destructive, expected):
    service = McpService(name="s", trusted=trusted, approval_default=default,
                         tool_approvals={"t": per_tool} if per_tool else {})
    assert service.tool_approval(tool="t", read_only=read_only, destructive=destructive) == expected


@pytest.mark.parametrize(
    "value", [[], "ask", {"t": "sometimes"}, {"t": True}, {"": "ask"}, {"x" * 129: "ask"}]
)
def test_a_per_tool_map_that_is_not_one_is_refused_in_admin_terms(value):
    service = McpService(name="s", protocol="sse", config={"url": "http://mcp.example.edu.cn/sse"},
                         tool_approvals=value)
    with pytest.raises(ValidationError) as refused:
        service.full_clean()
    assert list(refused.value.message_dict) == ["tool_approvals"]


def test_never_tools_are_left_out_and_policies_reach_the_tools(agent_factory, mcp_service_http, sub_agent_factory):
    mcp_service_http.trusted = True
    mcp_service_http.tool_approvals = {"add": "never"}
    mcp_service_http.save()
    agent = agent_factory(
        mcp_services=[mcp_service_http],
        sub_agents=[sub_agent_factory(name="canteen", approval_policy="ask"),
                    sub_agent_factory(name="notice", approval_policy="never")],
    )
    tools = {tool.name: tool for tool in async_to_sync(tools_for_agent)(agent, audience=EVERYONE, pooled=False)}
    assert "http-tools__add" not in tools and "call_notice" not in tools
    assert tools["call_canteen"].approval == "ask"
    assert tools["http-tools__register_course"].approval == "ask"  # trusted: its destructiveHint
    assert tools["http-tools__timetable"].approval == "auto"  # trusted: its readOnlyHint
    assert tools["http-tools__echo"].approval == "auto"  # no hint: the default
    # Keyword routing (the model is down) never calls a tool that asks first.
    assert tool_fallback_args(tool=tools["call_canteen"], question="食堂吃什么") is None
    assert tools["http-tools__timetable"].fallback_args("课表") == {}
