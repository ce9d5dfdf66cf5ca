"""The page in English (issue 26 point 2, docs/design.md#cross-cutting-rules), in headless Chromium: a browser that asks for
English gets the login page in English; the switch on the page turns it to English and back, is
kept for the student (a new browser after login is English too), the agent is told to answer in
English, times are written the English way, the server's own messages are English, and admin
stays Chinese for staff."""
import re

import pytest

from agents_app.runtime.loop import LANGUAGE_TEXT
from chat_app.models import Preference
from testkit.model.fake_llm import Reply
from testkit.web.page_helpers import ask, wait_answered

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _english_context(browser, live_site):
    from testkit.fixtures.browser import BrowserPage

    context = browser.new_context(viewport={"width": 1280, "height": 860}, locale="en-US")
    return context, BrowserPage(page=context.new_page(), base_url=live_site)


def test_a_browser_that_asks_for_english_gets_the_login_page_in_english(browser, live_site):
    context, site = _english_context(browser, live_site)
    try:
        site.goto("/login/")
        page = site.page
        assert page.get_attribute("html", "lang") == "en"
        assert page.title() == "Log in · Campus Assistant"
        assert page.text_content("#password-login") == "Log in"
        assert page.text_content("#language-switch") == "中文"
    finally:
        context.close()


def test_the_switch_turns_the_page_english_for_the_student_and_the_agent(
    browser_page, browser, live_site, user, password, agent, llm_settings, subagent_server
):
    site = browser_page
    site.login(username=user.username, password=password)
    page = site.page
    assert page.text_content("#send") == "发送"
    page.click("#language-switch")
    page.wait_for_selector("html[lang=en]")
    assert page.text_content("#send") == "Send" and page.get_attribute("#input", "placeholder") == "Ask something…"
    assert page.text_content("#language-switch") == "中文"
    assert Preference.objects.get(user=user).language == "en"

    # The scripts' strings too (the status line, a tool's chip), and the agent is told.
    agent.sub_agents.update(approval_policy="ask")
    llm_settings.reply_tool_calls(("call_canteen", {"message": "订一份午饭"}))
    llm_settings.reply_text("Your lunch is ordered.")
    ask(page, "Order me lunch")
    page.wait_for_selector(".tool[data-state=waiting] .approval-approve")
    assert page.text_content(".approval-approve") == "Approve"
    assert page.text_content("#status") == "Waiting for your confirmation…"
    until = page.text_content(".approval-until")
    assert re.fullmatch(r"Decide before \d\d:\d\d( [AP]M)?; no decision counts as a rejection\.", until), until
    system = llm_settings.requests[0].body["messages"][0]["content"]
    assert system.endswith(LANGUAGE_TEXT["en"])
    site.screenshot("english-approval")
    page.click(".approval-approve")
    wait_answered(page)

    # What the server writes for the student is English too: the model breaks off mid-answer.
    llm_settings.queue(Reply(text="Lunch is served until two.", chunk_size=4, drop_after_chunks=2))
    ask(page, "Until when is lunch?")
    wait_answered(page)
    assert page.text_content(".exchange:last-child .msg-assistant:not([hidden]) .msg-error") == (
        "The AI model stopped answering. Please try again later.")

    # Kept for the student: another browser, once logged in, is English as well.
    context = browser.new_context(viewport={"width": 1280, "height": 860}, locale="zh-CN")
    try:
        from testkit.fixtures.browser import BrowserPage

        other = BrowserPage(page=context.new_page(), base_url=live_site)
        other.login(username=user.username, password=password)
        other.page.wait_for_selector("html[lang=en]")
        assert other.page.text_content("#send") == "Send"
    finally:
        context.close()

    # And back.
    page.click("#language-switch")
    page.wait_for_selector("html[lang=zh-CN]")
    assert page.text_content("#send") == "发送"


def test_admin_stays_chinese_for_staff_whose_browser_reads_english(client, staff_user):
    client.cookies["django_language"] = "en"
    client.force_login(staff_user)
    page = client.get("/admin/", HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert "站点管理" in page or "管理" in page
    assert "Site administration" not in page


def test_the_english_page_names_the_assistant_one_way(browser, live_site, user, agent, agent_factory):
    """Issue 42: the English page's brand said "Campus Assistant" and its welcome "Hello, I'm 校园小智"
    (the demo agent bears the product's name). An agent named otherwise keeps its name."""
    agent_factory(slug="library", name="图书馆小助手", is_default=False)
    context, site = _english_context(browser, live_site)
    try:
        site.sign_in(user)
        page = site.page
        assert page.text_content(".brand span:last-child") == "Campus Assistant"
        assert page.text_content("#welcome h2") == "Hello, I'm Campus Assistant"
        assert page.eval_on_selector_all("#agent-select option", "os => os.map(o => o.textContent)") == [
            "Campus Assistant", "图书馆小助手"]
        assert "校园小智" not in page.text_content("#app")
    finally:
        context.close()
