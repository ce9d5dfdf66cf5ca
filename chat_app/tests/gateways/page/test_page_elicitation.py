"""A call whose MCP server asks the student something (an elicitation, issue 23 point 3) on the
chat page, in headless Chromium, against the SDK-built test MCP server: the form is built from the
question's schema with its defaults filled in, survives a reload, checks what the browser can
before anything is sent, and its answer reaches the server; a URL-mode question shows its link."""
import re

import pytest

from chat_app.models import Wait
from chat_app.tests.gateways.page.test_page_a11y import serious_violations
from testkit.mcp.servers import ENROL_MESSAGE, PAY_URL
from testkit.web.page_helpers import ask, wait_answered

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CARD = ".tool[data-state=waiting] .elicitation"
FORM_SNAPSHOT = """() => {
    const card = document.querySelector('.elicitation');
    const value = (name) => {
        const control = card.querySelector(`[name="${name}"]`);
        return control.type === 'checkbox' ? control.checked : control.value;
    };
    return {
        title: card.querySelector('.approval-title').textContent,
        message: card.querySelector('.elicitation-message').textContent,
        labels: [...card.querySelectorAll('.elicitation-label')].map((n) => n.textContent),
        email: {type: card.querySelector('[name=email]').type, required: card.querySelector('[name=email]').required},
        values: {email: value('email'), credits: value('credits'), campus: value('campus'), notify: value('notify')},
        campuses: [...card.querySelectorAll('[name=campus] option')].map((o) => o.textContent),
        buttons: [...card.querySelectorAll('button')].map((b) => b.textContent),
        chip: card.closest('.tool').querySelector('.tool-state').textContent,
    };
}"""


@pytest.fixture
def site(browser_page, user, password, agent_factory, mcp_service_http, mcp_pool_cleanup):
    agent_factory(mcp_services=[mcp_service_http])
    browser_page.sign_in(user)
    return browser_page


def test_the_form_shows_its_defaults_survives_a_reload_and_its_answer_reaches_the_server(
    site, llm_settings, mcp_http_server
):
    page = site.page
    llm_settings.reply_tool_calls(("http-tools__enrol", {}), text="需要你填一下选课信息。")
    llm_settings.reply_text("已经为你选好了。")
    ask(page, "帮我选课")
    page.wait_for_selector(CARD)
    form = page.evaluate(FORM_SNAPSHOT)
    assert form["title"] == "“http-tools”需要你回答" and form["message"] == ENROL_MESSAGE
    assert form["chip"] == "等待回答" and page.text_content("#status") == "等待你回答…"
    assert form["email"] == {"type": "email", "required": True}
    assert form["values"] == {"email": "", "credits": "3", "campus": "西区", "notify": True}  # SEP-1034 defaults
    assert form["campuses"] == ["东区", "西区"] and form["buttons"] == ["提交", "不回答"]
    assert serious_violations(page) == []
    site.screenshot("elicitation-form")

    page.wait_for_url(re.compile(r"/c/[0-9a-f-]+/"))
    page.reload()  # the run waits on the server; the page shows the same form again
    page.wait_for_selector(CARD)
    assert page.evaluate(FORM_SNAPSHOT)["values"]["credits"] == "3"

    page.click(".elicitation .approval-approve")  # no email yet: the browser says so, nothing is sent
    assert page.evaluate("document.querySelector('.elicitation [name=email]').validity.valueMissing")
    assert Wait.objects.get().status == Wait.Status.PENDING
    page.fill(".elicitation [name=email]", "alice@example.edu.cn")
    page.fill(".elicitation [name=credits]", "4")
    page.select_option(".elicitation [name=campus]", "东区")
    page.uncheck(".elicitation [name=notify]")
    page.fill(".elicitation [name=note]", "周三下午")
    page.click(".elicitation .approval-approve")
    wait_answered(page)
    assert page.query_selector(".elicitation") is None
    assert page.get_attribute(".tool", "data-state") == "done"
    assert "已经为你选好了。" in page.text_content(".msg-assistant")
    assert mcp_http_server.elicitations[-1] == {"tool": "enrol", "action": "accept", "content": {
        "email": "alice@example.edu.cn", "credits": 4, "campus": "东区", "notify": False, "note": "周三下午"}}


def test_a_page_to_visit_shows_its_host_and_done_goes_on(site, llm_settings, mcp_http_server):
    page = site.page
    llm_settings.reply_tool_calls(("http-tools__pay", {}))
    llm_settings.reply_text("缴费完成。")
    ask(page, "帮我交学费")
    page.wait_for_selector(CARD)
    link = page.query_selector(".elicitation .elicitation-open")
    assert link.text_content() == "打开 pay.example.edu.cn" and link.get_attribute("href") == PAY_URL
    assert link.get_attribute("rel") == "noopener noreferrer"
    assert [b.text_content() for b in page.query_selector_all(".elicitation button")] == ["我已完成", "不回答"]
    page.click(".elicitation .approval-approve")
    wait_answered(page)
    assert "缴费完成。" in page.text_content(".msg-assistant")
    assert [e["action"] for e in mcp_http_server.elicitations] == ["cancel", "accept"]
