"""A student connects their own account at an MCP service from the chat page (issue 23 point 2),
in headless Chromium: the run waits with a 「连接“图书馆”账号」 card, the link opens the service's
authorization page in a new tab (the loopback authorization server, built with the mcp SDK,
approves at once and sends the browser back to the gateway's callback), and the answer goes on
in the first tab, as the student."""
import pytest

from agents_app.models import McpOAuthGrant, McpService
from chat_app.tests.gateways.page.test_page_a11y import serious_violations
from testkit.mcp.oauth_servers import OAuthMcpServer
from testkit.web.page_helpers import LAST_ANSWER, ask, wait_answered

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CARD = ".tool[data-state=waiting] .authorization"


@pytest.fixture
def library(settings, live_site, agent_factory):
    settings.MCP_OAUTH_REDIRECT_URL = f"{live_site}/mcp/oauth/callback/"
    with OAuthMcpServer() as server:
        service = McpService.objects.create(name="library", display_name="图书馆", protocol="streamable-http",
                                            config={"url": server.url, "oauth": {}}, timeout_sec=10)
        agent_factory(mcp_services=[service])
        yield server


@pytest.fixture
def chat(browser_page, user, password, llm_settings, library):
    browser_page.sign_in(user)
    return browser_page


def test_the_student_connects_the_account_in_a_new_tab_and_the_answer_goes_on(chat, llm_settings, library, user):
    page = chat.page
    llm_settings.reply_tool_calls(("library__connect_account", {}), text="我先帮你连接图书馆账号。")
    llm_settings.reply_tool_calls(("library__whoami", {}))
    llm_settings.reply_text("你是 alice，目前借了 2 本书。")
    ask(page, "我借了哪些书？")
    page.wait_for_selector(CARD)
    assert page.text_content(f"{CARD} .approval-title") == "需要先连接“图书馆”账号才能继续"
    link = page.query_selector(f"{CARD} a.authorization-open")
    assert link.text_content() == "连接“图书馆”账号"
    assert link.get_attribute("href").startswith(f"{library.issuer}/authorize?")
    assert link.get_attribute("target") == "_blank" and "noopener" in link.get_attribute("rel")
    assert page.text_content("#status") == "等待你连接账号…"
    assert page.text_content(".tool[data-state=waiting] .tool-state") == "等待连接账号"
    assert serious_violations(page) == []
    chat.screenshot("mcp-oauth-card")

    link.click()  # a new tab (the page proxy has no expect_page: wait for the context's second page)
    for _ in range(100):
        if len(page.context.pages) == 2:
            break
        page.wait_for_timeout(50)
    tab = page.context.pages[-1]
    tab.wait_for_url(f"{chat.base_url}/c/**")  # back from the authorization page: the conversation
    wait_answered(page)
    assert "你是 alice，目前借了 2 本书。" in page.text_content(LAST_ANSWER)
    assert page.query_selector(".authorization") is None
    states = page.eval_on_selector_all(f"{LAST_ANSWER} .tool", "(chips) => chips.map((c) => c.dataset.state)")
    assert states == ["done", "done"]
    assert McpOAuthGrant.objects.filter(user=user).exists()
    tab.close()

    # 「我的数据」 lists the connected account; 断开 deletes its tokens.
    page.click("#my-data-open")
    page.wait_for_selector("#my-accounts li")
    assert page.text_content("#my-accounts .my-account-name") == "图书馆"
    assert serious_violations(page) == []
    page.click("#my-accounts .my-account-remove")
    page.wait_for_selector("#my-accounts-empty:not([hidden])")
    assert page.text_content("#my-data-status") == "已断开“图书馆”账号。"
    assert not McpOAuthGrant.objects.filter(user=user).exists()


def test_the_student_can_decline_from_the_card(chat, llm_settings, library):
    page = chat.page
    llm_settings.reply_tool_calls(("library__connect_account", {}))
    llm_settings.reply_text("好的，不连接就查不到借阅记录。")
    ask(page, "我借了哪些书？")
    page.wait_for_selector(CARD)
    page.click(f"{CARD} .approval-reject")
    wait_answered(page)
    assert "不连接就查不到" in page.text_content(LAST_ANSWER)
    assert page.get_attribute(f"{LAST_ANSWER} .tool", "data-state") == "failed"
    assert library.authorize_requests == []
