"""A tool call that waits for the student (docs/design.md#runs, issue 12) on the chat page, in headless
Chromium: the card shows what will run, survives a reload, and approve / reject go on live."""
import re

import pytest

from chat_app.models import Conversation, Message, Wait
from testkit.web.page_helpers import ask, wait_answered

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CARD = ".tool[data-state=waiting] .approval"
# The card as a student reads it (text only), and whether anything in it is markup.
CARD_SNAPSHOT = """() => {
    const card = document.querySelector('.approval');
    if (!card) return null;
    return {
        title: card.querySelector('.approval-title').textContent,
        args: [...card.querySelectorAll('.approval-args dt, .approval-args dd')].map((n) => n.textContent),
        until: card.querySelector('.approval-until')?.textContent || '',
        buttons: [...card.querySelectorAll('button')].map((b) => b.textContent),
        markup: card.querySelectorAll('img, script, a').length,
        chip: card.closest('.tool').querySelector('.tool-state').textContent,
    };
}"""
HOSTILE = '<img src=x onerror="window.__xss=1">午饭'


@pytest.fixture
def site(browser_page, user, password, agent, llm_settings, subagent_server):
    agent.sub_agents.update(approval_policy="ask")
    browser_page.sign_in(user)
    return browser_page


def test_approve_after_a_reload_runs_the_tool_and_the_answer_goes_on(site, llm_settings, subagent_server):
    site.hostile_markup = True  # the sub-agent echoes HOSTILE into its answer: the sanitizer parses it
    page = site.page
    llm_settings.reply_tool_calls(("call_canteen", {"message": HOSTILE}), text="这会替你下单，需要确认。")
    llm_settings.reply_text("已经为你下单。")
    ask(page, "帮我订午饭")
    page.wait_for_selector(CARD)
    card = page.evaluate(CARD_SNAPSHOT)
    assert card["title"].startswith("需要你确认后才会执行：") and card["chip"] == "等待确认"
    assert card["args"] == ["内容", HOSTILE] and card["markup"] == 0  # shown as text, never as markup
    assert re.fullmatch(r"请在 \d\d:\d\d 前决定，逾时视为拒绝。", card["until"])
    assert card["buttons"] == ["批准", "拒绝"]
    site.screenshot("approval-card")
    assert page.text_content("#status") == "等待你确认…"
    assert subagent_server.requests == []

    page.wait_for_url(re.compile(r"/c/[0-9a-f-]+/"))
    page.reload()  # the run waits on the server; the page finds it again
    page.wait_for_selector(CARD)
    assert page.evaluate(CARD_SNAPSHOT)["args"] == ["内容", HOSTILE]
    page.click(".approval-approve")
    wait_answered(page)
    assert page.query_selector(".approval") is None
    assert page.get_attribute(".tool", "data-state") == "done"
    assert "已经为你下单。" in page.text_content(".msg-assistant")
    assert page.evaluate("() => window.__xss === undefined")
    assert len(subagent_server.requests) == 1
    assert Wait.objects.get().status == Wait.Status.APPROVED


def test_reject_shows_the_call_as_not_run_and_the_models_answer(site, llm_settings, subagent_server):
    page = site.page
    llm_settings.reply_tool_calls(("call_canteen", {"message": "订一份"}))
    llm_settings.reply_text("好的，不订了。")
    ask(page, "帮我订午饭")
    page.wait_for_selector(CARD)
    page.click(".approval-reject")
    wait_answered(page)
    assert page.get_attribute(".tool", "data-state") == "failed"
    assert page.text_content(".tool .tool-output").strip() == "已拒绝，未执行。"
    assert "好的，不订了。" in page.text_content(".msg-assistant")
    assert subagent_server.requests == []
    conversation = Conversation.objects.get()
    tool_row = Message.objects.get(conversation=conversation, role="tool")
    assert tool_row.meta["ok"] is False and tool_row.meta["error"] == "已拒绝，未执行。"
