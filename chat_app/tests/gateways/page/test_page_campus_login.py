"""Campus login in Chromium (issue 13), desktop and phone: the login page's campus button goes
through the loopback OpenID Connect provider and back; sub-agents receive that account's token;
a campus-token expiry (40102) says "登录已过期，请重新登录" with a button that logs in again and
returns to the same conversation."""
import re

import pytest

from chat_app.models import CampusIdentity, Conversation
from testkit.web.page_helpers import LAST_ANSWER, VIEWPORT_IDS, VIEWPORTS, ask, sized, wait_answered

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=VIEWPORT_IDS)
def test_campus_login_then_expiry_then_back_to_the_same_conversation(
    browser_page, oidc_settings, agent, llm_settings, subagent_server, viewport
):
    provider = oidc_settings
    page = sized(browser_page, viewport)
    browser_page.goto("/")
    page.wait_for_url(re.compile(r"/login/"))
    page.click("#campus-login")
    browser_page.chat_ready()
    assert CampusIdentity.objects.get().sub == "2023010001"
    assert len(provider.authorize_requests) == 1

    llm_settings.reply_tool_calls(("call_canteen", {"message": "[[mode:expired]] 今日菜单"}))
    llm_settings.reply_text("校园账号登录已过期，请重新登录后再查。")
    ask(page, "今天吃什么")
    wait_answered(page)
    token = next(iter(provider.access))
    assert subagent_server.requests[-1].headers["authorization"] == f"Bearer {token}"
    relogin = f"{LAST_ANSWER} .relogin"
    assert page.text_content(relogin).startswith("登录已过期，请重新登录")
    conversation = Conversation.objects.get()
    assert page.url.endswith(f"/c/{conversation.id}/")

    page.click(f"{relogin} .campus-relogin")
    page.wait_for_url(re.compile(rf"/c/{conversation.id}/$"))
    browser_page.chat_ready()
    assert len(provider.authorize_requests) == 2  # really went to the provider again
    assert page.text_content(".exchange:last-child .msg-user .msg-text") == "今天吃什么"
    # The stored error shows the same way after the reload, button included.
    assert page.is_visible(f"{relogin} .campus-relogin")

    # The campus login's redirects leave this origin on purpose: they are the only requests that do.
    browser_page.requests[:] = [url for url in browser_page.requests if not url.startswith(provider.issuer + "/")]
