"""The agent page's "列出工具" button in Chromium: opening the page starts no MCP server, the
button (a POST) lists the tools the model will be offered, under the page's CSP."""
import pytest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_list_tools_button_lists_the_offered_tools(browser_page, staff_user, password, agent_factory, sub_agent,
                                                   mcp_service_stdio, mcp_spawn_log):
    agent = agent_factory(sub_agents=[sub_agent], mcp_services=[mcp_service_stdio])
    page = browser_page.page
    browser_page.goto("/admin/login/")
    page.fill("#id_username", staff_user.username)
    page.fill("#id_password", password)
    page.click("input[type=submit]")
    page.wait_for_selector("#content-main")

    browser_page.goto(f"/admin/agents_app/agent/{agent.pk}/change/")
    page.wait_for_selector("#id_sub_agents_to")
    assert mcp_spawn_log.read_text() == ""  # opening the page started nothing

    page.click("button.object-tools-button:has-text('列出工具')")  # not the other object tools
    page.wait_for_selector(".messagelist .success")
    text = page.text_content(".messagelist .success")
    assert "tools__add" in text and "call_canteen" in text
    assert page.url.endswith(f"/admin/agents_app/agent/{agent.pk}/change/")
    assert len(mcp_spawn_log.read_text().split()) == 1
    assert browser_page.policy_breaks() == []
