"""An agent's rollback from its history (campus_agent.base.admin_history) runs its routing cases against
the rolled-back version first (insights_app.admin_extensions), and a rollback that breaks a case needs
a second confirmation; the next turn then uses the restored prompt, without a restart."""
import re

import pytest
from django.urls import reverse

from agents_app.models import Agent
from insights_app.admin_extensions import ROLLBACK_ACCEPT_MISSING
from insights_app.routing.preview import BREAKS, FIXES
from insights_app.tests.helpers import route_by_description
from testkit.web.sse import chat

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]

RESTORED_PROMPT = "你是校园小智：先查食堂，再回答。"
BROKEN_PROMPT = "（坏掉的提示词）"


def _url(agent: Agent, record) -> str:
    return reverse("admin:agents_app_agent_history_rollback", args=[agent.pk, record.history_id])


def _token(page) -> str:
    return re.search(r'name="preview_token" value="([^"]+)"', page.content.decode()).group(1)


def _rows(page) -> dict[str, str]:
    return {row.case.question: row.change for preview in page.context["previews"] for row in preview.rows}


def test_rollback_shows_the_routing_preview_before_saving(staff_client, routing_agent, canteen_case,
                                                          subagents_unserved):
    """Keyword mode (no model configured): the preview is the keyword routing check."""
    canteen, course = subagents_unserved
    routing_agent.system_prompt = RESTORED_PROMPT
    routing_agent.save()
    version = routing_agent.history.latest()  # with both sub-agents
    routing_agent.system_prompt = BROKEN_PROMPT
    routing_agent.save()
    routing_agent.sub_agents.set([course])

    page = staff_client.post(_url(routing_agent, version))

    assert page.status_code == 200 and "确认回滚" in page.content.decode()
    assert page.context["previews"][0].mode == "keyword"
    assert _rows(page) == {canteen_case.question: FIXES}
    assert not page.context["risky"]
    routing_agent.refresh_from_db()
    assert routing_agent.system_prompt == BROKEN_PROMPT  # nothing saved yet

    done = staff_client.post(_url(routing_agent, version), {"preview_token": _token(page)})
    assert done.status_code == 302
    routing_agent.refresh_from_db()
    assert routing_agent.system_prompt == RESTORED_PROMPT
    assert set(routing_agent.sub_agents.all()) == {canteen, course}


def test_a_rollback_that_breaks_a_case_needs_a_second_confirmation(staff_client, routing_agent, canteen_case):
    first = routing_agent.history.earliest()  # created, before its sub-agents were linked
    assert not first.sub_agents.exists()

    page = staff_client.post(_url(routing_agent, first))
    assert _rows(page) == {canteen_case.question: BREAKS}
    html = page.content.decode()
    assert page.context["risky"] and "1 个路由用例会失败" in html and 'name="accept_regressions"' in html

    again = staff_client.post(_url(routing_agent, first), {"preview_token": _token(page)})  # box not ticked
    assert again.status_code == 200 and ROLLBACK_ACCEPT_MISSING in again.content.decode()
    assert routing_agent.sub_agents.count() == 2

    forged = staff_client.post(_url(routing_agent, first), {"preview_token": "x", "accept_regressions": "1"})
    assert forged.status_code == 200  # no valid token: the preview again, nothing saved
    assert routing_agent.sub_agents.count() == 2

    done = staff_client.post(_url(routing_agent, first), {"preview_token": _token(again), "accept_regressions": "1"})
    assert done.status_code == 302
    assert routing_agent.sub_agents.count() == 0


def test_a_preview_goes_stale_when_the_agent_changes_meanwhile(staff_client, routing_agent, canteen_case):
    routing_agent.system_prompt = BROKEN_PROMPT
    routing_agent.save()
    version = routing_agent.history.latest()
    routing_agent.system_prompt = RESTORED_PROMPT
    routing_agent.save()
    token = _token(staff_client.post(_url(routing_agent, version)))
    routing_agent.temperature = 0.2
    routing_agent.save()  # someone else saved: that preview no longer describes this rollback

    page = staff_client.post(_url(routing_agent, version), {"preview_token": token})
    assert page.status_code == 200 and "确认回滚" in page.content.decode()
    routing_agent.refresh_from_db()
    assert routing_agent.system_prompt == RESTORED_PROMPT


def test_the_confirm_page_says_what_the_rollback_changes(staff_client, settings, llm_server, llm_server_second,
                                                        provider_factory, routing_agent, canteen_case):
    """The version's prompt and provider differ from now: each side is asked with its own provider
    (as its turns would be, LLM_* unset), and the page names the changes, never "路由不会变"."""
    settings.LLM_BASE_URL = ""
    primary = provider_factory(name="primary", base_url=llm_server.url)
    backup = provider_factory(name="backup", base_url=llm_server_second.url, default_model="backup-model")
    llm_server.responder = llm_server_second.responder = route_by_description
    routing_agent.provider, routing_agent.system_prompt = primary, RESTORED_PROMPT
    routing_agent.save()
    version = routing_agent.history.latest()
    routing_agent.provider, routing_agent.system_prompt = backup, BROKEN_PROMPT
    routing_agent.save()

    page = staff_client.post(_url(routing_agent, version))

    preview = page.context["previews"][0]
    assert preview.mode == "model"
    assert preview.changes == ["提示词", "模型提供方（backup → primary）", "模型（backup-model → fake-model）"]
    html = page.content.decode()
    assert "路由不会变" not in html
    assert "这次修改会改变：提示词、模型提供方（backup → primary）、模型（backup-model → fake-model）。" in html
    assert llm_server.requests[0].messages[0]["content"] == RESTORED_PROMPT  # after: the version's provider
    assert llm_server_second.requests[0].messages[0]["content"] == BROKEN_PROMPT  # before: the agent now


def test_a_prompt_change_under_keyword_routing_is_named(staff_client, routing_agent, canteen_case):
    routing_agent.system_prompt = RESTORED_PROMPT
    routing_agent.save()
    version = routing_agent.history.latest()
    routing_agent.system_prompt = BROKEN_PROMPT
    routing_agent.save()

    page = staff_client.post(_url(routing_agent, version))

    html = page.content.decode()
    assert page.context["previews"][0].changes == ["提示词"]
    assert "路由不会变" not in html
    assert "这次修改会改变：提示词。关键词路由不读提示词和模型" in html


@pytest.mark.django_db(transaction=True)
def test_the_next_turn_uses_the_rolled_back_prompt(live_asgi, llm_settings, staff_client, agent, user, headers_for):
    agent.system_prompt = RESTORED_PROMPT
    agent.save()
    version = agent.history.latest()
    agent.system_prompt = BROKEN_PROMPT
    agent.save()
    headers = headers_for(user)

    llm_settings.reply_text("坏的回答")
    chat(live_asgi, {"message": "你好"}, headers=headers)
    assert llm_settings.last_request.messages[0] == {"role": "system", "content": BROKEN_PROMPT}

    page = staff_client.post(_url(agent, version))  # no cases: the confirm page says so
    assert "没有启用的路由用例" in page.content.decode()
    assert staff_client.post(_url(agent, version), {"preview_token": _token(page)}).status_code == 302

    llm_settings.reply_text("好的回答")
    chat(live_asgi, {"message": "你好"}, headers=headers)
    assert llm_settings.last_request.messages[0] == {"role": "system", "content": RESTORED_PROMPT}
