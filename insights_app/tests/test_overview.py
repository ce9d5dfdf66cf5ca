"""The admin's 运营概况 page (issue 25 point 5): today's turns and users, interrupted replies,
runs and approvals in progress, open breakers, the slowest tools, quota use; linked from the
admin's home; refused to staff who may not see usage."""
import pytest
from django.contrib.auth.models import Permission
from django.utils import timezone

from campus_agent.base.circuit import circuit_enter, circuit_failure
from campus_agent.base.metrics import tool_call_counted
from chat_app.models import Conversation, Message
from insights_app.models import UsageDaily
from subagents_app.client import subagent_circuit_key

pytestmark = pytest.mark.django_db


def test_today_at_a_glance(client, staff_user, user, sub_agent, settings):
    settings.USER_DAILY_TOKEN_QUOTA = 1000
    UsageDaily.objects.create(day=timezone.localdate(), user=user, username=user.username, agent_name="小智",
                              model="qwen", turns=3, fallback_turns=1, prompt_tokens=300, completion_tokens=200)
    conversation = Conversation.objects.create(user=user, title="t")
    Message.objects.create(conversation=conversation, role="assistant", content="好", seq=1)
    Message.objects.create(conversation=conversation, role="assistant", content="半", seq=2, meta={"interrupted": True})
    for _ in range(5):  # the breaker opens after repeated failures
        ticket = circuit_enter(source=subagent_circuit_key(sub_agent), name=sub_agent.name, lease_sec=5)
        if ticket is None:
            break
        circuit_failure(ticket, reason="boom")
    tool_call_counted(tool="slow_tool_for_overview", kind="mcp", outcome="ok", seconds=42.0)

    client.force_login(staff_user)
    home = client.get("/admin/").content.decode()
    assert "/admin/insights_app/usagedaily/overview/" in home
    page = client.get("/admin/insights_app/usagedaily/overview/")
    assert page.status_code == 200
    overview = page.context["overview"]
    assert (overview["turns"], overview["fallback_turns"], overview["users"], overview["tokens"]) == (3, 1, 1, 500)
    assert (overview["interrupted"], overview["replies"]) == (1, 2)
    assert [b["name"] for b in overview["breakers"]] == [sub_agent.name]
    assert overview["slowest"][0].tool == "slow_tool_for_overview" and overview["slowest"][0].mean_sec >= 42
    assert overview["top_users"][0]["username"] == user.username
    html = page.content.decode()
    assert "50%" in html and "熔断中" in html and "slow_tool_for_overview" in html


def test_staff_without_the_usage_permission_are_refused(client, password):
    from django.contrib.auth import get_user_model

    editor = get_user_model().objects.create_user(username="editor2", password=password, is_staff=True)
    editor.user_permissions.set(Permission.objects.filter(codename="view_agent"))
    client.force_login(editor)
    assert client.get("/admin/insights_app/usagedaily/overview/").status_code == 403
    assert "usagedaily/overview" not in client.get("/admin/").content.decode()
