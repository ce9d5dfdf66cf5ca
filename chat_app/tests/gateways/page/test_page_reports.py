"""Reporting an answer on the page (举报, issue 44 point 5), in Chromium at desktop and phone sizes:
the button beside the thumbs opens a dialog, a reason is picked (none picked: asked for), the
confirmation shows and the button says the answer is reported, after a reload too. By keyboard
alone, with focus back on the button; axe finds nothing serious in the open dialog; in English."""
import pytest

from chat_app.models import Conversation, Message
from chat_app.tests.gateways.page.test_page_a11y import serious_violations
from safety_app.models import AnswerReport
from testkit.web.page_helpers import LAST_ANSWER, VIEWPORT_IDS, VIEWPORTS, ask, sized, wait_answered

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ANSWER = "一食堂今天推荐 **红烧肉**（12 元）。"
BUTTON = f"{LAST_ANSWER} .report-btn"
FOCUSED_IS_BUTTON = f"() => document.activeElement === document.querySelector('{BUTTON}')"


@pytest.fixture
def chat(browser_page, user, password, agent, llm_settings):
    browser_page.sign_in(user)
    return browser_page


def _answered(page, llm_settings) -> Message:
    llm_settings.reply_text(ANSWER)
    ask(page, "一食堂吃什么")
    wait_answered(page)
    return Message.objects.get(conversation=Conversation.objects.get(user__username="20230001"), role="assistant")


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=VIEWPORT_IDS)
def test_a_report_is_sent_confirmed_and_shown_after_a_reload(chat, llm_settings, viewport):
    page = sized(chat, viewport)
    answer = _answered(page, llm_settings)
    assert page.get_attribute(BUTTON, "aria-label") == "举报这个回答"

    page.click(BUTTON)
    page.wait_for_selector("#report-dialog[open]")
    page.click("#report-submit")  # no reason picked: asked for one, nothing sent
    page.wait_for_function("() => document.getElementById('report-status').textContent === '请选择举报原因。'")
    assert not AnswerReport.objects.exists()
    page.get_by_label("虚假或错误信息").check()
    assert page.text_content("#report-status") == ""  # the ask for a reason goes once one is picked
    page.fill("#report-detail", "今天是 15 元")
    chat.screenshot(f"report-dialog-{viewport['width']}")
    page.click("#report-submit")

    page.wait_for_selector(f"{LAST_ANSWER} .report-thanks")
    assert page.text_content(f"{LAST_ANSWER} .report-thanks") == "已收到举报，我们会尽快处理"
    assert not page.is_visible("#report-dialog")
    assert page.get_attribute(BUTTON, "aria-label") == "已举报（待处理）"
    assert page.text_content(f"{BUTTON} .report-state") == "已举报"
    chat.screenshot(f"report-filed-{viewport['width']}")
    report = AnswerReport.objects.get()
    assert (report.message_id, report.reason, report.detail) == (answer.id, "false", "今天是 15 元")
    assert report.answer == answer.content and report.question == "一食堂吃什么"

    page.reload()
    chat.chat_ready()
    assert page.get_attribute(BUTTON, "aria-label") == "已举报（待处理）"
    assert page.text_content(f"{BUTTON} .report-state") == "已举报"
    page.click(BUTTON)  # reported already: the status, not the dialog again
    page.wait_for_function("() => document.getElementById('status').textContent === '你已举报过这个回答：待处理'")
    assert not page.is_visible("#report-dialog")
    assert AnswerReport.objects.count() == 1


def test_a_report_by_keyboard_alone_and_the_open_dialog_passes_axe(chat, llm_settings):
    page = chat.page
    _answered(page, llm_settings)

    page.focus(BUTTON)
    page.keyboard.press("Enter")
    page.wait_for_selector("#report-dialog[open]")
    assert page.evaluate("() => document.activeElement.name") == "reason"  # focus is in the dialog
    assert serious_violations(page) == []
    page.keyboard.press("Escape")  # closes the dialog, stops nothing, focus back on the button
    page.wait_for_function("() => !document.getElementById('report-dialog').open")
    page.wait_for_function(FOCUSED_IS_BUTTON)

    page.keyboard.press("Enter")
    page.wait_for_selector("#report-dialog[open]")
    page.keyboard.press("Space")  # the first reason
    page.keyboard.press("ArrowDown")  # the next one
    page.keyboard.press("Tab")
    page.keyboard.type("太露骨了")
    page.keyboard.press("Tab")  # 取消
    page.keyboard.press("Tab")  # 提交举报
    page.keyboard.press("Enter")

    page.wait_for_selector(f"{LAST_ANSWER} .report-thanks")
    page.wait_for_function(FOCUSED_IS_BUTTON)
    assert (AnswerReport.objects.get().reason, AnswerReport.objects.get().detail) == ("sexual", "太露骨了")


def test_the_report_dialog_in_english(browser, live_site, user, agent, llm_settings):
    from testkit.fixtures.browser import BrowserPage

    context = browser.new_context(viewport={"width": 1280, "height": 860}, locale="en-US")
    try:
        site = BrowserPage(page=context.new_page(), base_url=live_site)
        site.sign_in(user)
        page = site.page
        assert page.get_attribute("html", "lang") == "en"
        _answered(page, llm_settings)
        assert page.get_attribute(BUTTON, "aria-label") == "Report this answer"
        page.click(BUTTON)
        page.wait_for_selector("#report-dialog[open]")
        assert page.text_content("#report-title") == "Report this answer"
        page.get_by_label("False or wrong information").check()
        page.click("#report-submit")
        page.wait_for_selector(f"{LAST_ANSWER} .report-thanks")
        assert page.text_content(f"{LAST_ANSWER} .report-thanks") == "Report received. We will look into it as soon as we can."
        assert page.get_attribute(BUTTON, "aria-label") == "Reported (Pending)"
    finally:
        context.close()
