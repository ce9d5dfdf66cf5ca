"""The pages under their Content-Security-Policy in Chromium (issue 9): the chat page, the login
page, the admin and the API docs run with zero CSP violations, and a hostile model answer makes
the browser fetch nothing from another origin.

`browser_page` (browser_fixtures.py) records `securitypolicyviolation` events, the console's CSP
messages and every request; it fails any test on a violation or a request to another origin
(a test feeding hostile markup accepts only the sanitizer's own parse reports, see there).
The tests below also assert it at each step, so a failure names the step.
"""
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agents_app.models import McpService
from chat_app.tests.gateways.page.test_page_chat import _ask, _wait_answered
from testkit.model.fake_llm import Reply

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ANSWER_WITH_TABLE_AND_CODE = (
    "各食堂人数如下：\n\n| 食堂 | 人数 |\n|:---|---:|\n| 一食堂 | 120 |\n| 二食堂 | 80 |\n\n"
    "查询的代码：\n\n```python\nprint(\"<b>一食堂</b>\")\n```\n"
)

CANVAS_PAINTED = """() => {
    const canvas = document.querySelector('#messages .chart canvas');
    if (!canvas || !canvas.width) return false;
    const { data } = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height);
    let painted = 0;
    for (let i = 3; i < data.length; i += 4) if (data[i] > 0) painted++;
    return painted > 500;
}"""


class CountingHost:
    """A "remote" web server on another loopback port (another origin): counts what reaches it."""

    def __init__(self):
        paths = self.paths = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                paths.append(self.path)
                self.send_response(200)
                self.send_header("Content-Type", "image/gif")
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_POST = do_GET  # noqa: N815 - pings are POSTs

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, name="counting-host", daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc_info):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def remote_host():
    with CountingHost() as host:
        yield host


def remote_loading_markup(remote: str) -> str:
    """Markup that makes a browser load a URL without a click, each kind pointing at `remote`."""
    return (
        f'<table background="{remote}/table.gif"><tbody background="{remote}/tbody.gif"><tr>'
        f'<th background="{remote}/th.gif">食堂</th><td background="{remote}/td.gif">一食堂</td></tr></tbody></table>\n\n'
        f'<img src="{remote}/img.gif"> <img src="/static/img/logo.svg" srcset="{remote}/srcset.gif 2x">'
        f'<svg><image href="{remote}/svg-image.gif"/></svg>'
        f'<div style="background:url({remote}/style.gif)">样式</div>'
        f'<video poster="{remote}/poster.gif"></video><a href="https://jwc.example.edu.cn/" ping="{remote}/ping">外链</a>\n\n'
        f"![图]({remote}/markdown.gif)"
    )


@pytest.fixture
def chat(browser_page, user, password, agent, llm_settings, subagent_server):
    browser_page.sign_in(user)
    return browser_page




def _settle(site) -> None:
    """Lays the page out (backgrounds are fetched when styled), then makes one same-origin request
    and waits for its answer: loads that the page was going to start have been started."""
    site.page.evaluate("async () => { document.body.getBoundingClientRect(); await fetch('/healthz'); }")
    assert any(url.endswith("/healthz") for url in site.requests)


def test_chat_page_with_a_table_code_and_a_chart_runs_under_the_policy(chat, llm_settings):
    llm_settings.reply_tool_calls(("call_canteen", {"message": "各食堂人数"}))
    llm_settings.queue(Reply(text=ANSWER_WITH_TABLE_AND_CODE, chunk_delay=0.02))
    page = chat.page
    response = chat.goto("/")
    assert "script-src 'self'" in response.headers["content-security-policy"]
    chat.chat_ready()

    _ask(page, "各食堂现在人多吗？")
    _wait_answered(page)
    page.wait_for_function(CANVAS_PAINTED)
    assert page.is_visible(".msg-assistant .segment table td[align=right]")
    assert "<b>一食堂</b>" in page.text_content(".msg-assistant .segment pre code")
    page.click(".tool summary")
    page.reload()
    chat.chat_ready()
    page.wait_for_function(CANVAS_PAINTED)
    _settle(chat)
    assert chat.policy_breaks() == []
    assert chat.errors == []


def test_a_hostile_answer_fetches_nothing_from_another_origin(chat, llm_settings, remote_host):
    chat.hostile_markup = True
    markup = remote_loading_markup(remote_host.url)
    # The same markup from the sub-agent (shown under the tool chip) and from the model.
    llm_settings.reply_tool_calls(("call_canteen", {"message": markup}))
    llm_settings.reply_text("结果如下：\n\n" + markup)
    page = chat.page

    _ask(page, "给我看看食堂")
    _wait_answered(page)
    page.click(".tool summary")  # the sub-agent's text is laid out only when the chip is open
    assert page.is_visible(".msg-assistant .segment table") and page.is_visible(".tool-output table")
    _settle(chat)
    assert remote_host.paths == []
    assert chat.foreign_requests() == [] and chat.policy_breaks() == []

    page.reload()  # the stored rows go through the same sanitizer
    chat.chat_ready()
    page.click(".tool summary")
    _settle(chat)
    assert remote_host.paths == []
    assert chat.foreign_requests() == [] and chat.policy_breaks() == []
    # Same-origin images stay, and links still open (in a tab that cannot reach this one).
    assert page.locator('.msg-assistant .segment img[src="/static/img/logo.svg"]').count() == 1
    assert page.get_attribute(".msg-assistant .segment a", "rel").startswith("noopener noreferrer")


def test_login_page_and_api_docs_run_under_the_policy(browser_page):
    response = browser_page.goto("/login/")
    assert "default-src 'self'" in response.headers["content-security-policy"]
    browser_page.page.wait_for_selector("#id_username")

    browser_page.goto("/api/v1/docs")
    browser_page.page.wait_for_selector(".swagger-ui .opblock")  # the schema loaded and rendered
    browser_page.page.click(".swagger-ui .opblock-summary")  # an operation opens
    browser_page.page.wait_for_selector(".swagger-ui .opblock-body")
    _settle(browser_page)
    assert browser_page.policy_breaks() == []


def test_admin_runs_under_the_policy(browser_page, staff_user, password, agent):
    service = McpService.objects.create(
        name="weather", protocol="streamable-http", config={"url": "http://127.0.0.1:9/mcp"}
    )
    page = browser_page.page
    browser_page.goto("/admin/login/")
    page.fill("#id_username", staff_user.username)
    page.fill("#id_password", password)
    page.click("input[type=submit]")
    page.wait_for_selector("#content-main")
    assert browser_page.policy_breaks() == []

    # An agent's change form: filter_horizontal widgets (admin JS) move a sub-agent out and back.
    browser_page.goto(f"/admin/agents_app/agent/{agent.pk}/change/")
    page.wait_for_selector("#id_sub_agents_remove_all")
    page.click("#id_sub_agents_remove_all")
    page.wait_for_function("() => document.getElementById('id_sub_agents_to').options.length === 0")
    page.click("#id_sub_agents_add_all")
    page.wait_for_function("() => document.getElementById('id_sub_agents_to').options.length === 1")
    assert browser_page.policy_breaks() == []

    # The MCP service list and an action: select all, pick delete, land on its confirmation page.
    browser_page.goto("/admin/agents_app/mcpservice/")
    page.check("#action-toggle")
    page.select_option("select[name=action]", "delete_selected")
    page.click("button[name=index]")
    page.wait_for_selector("form input[name=post]", state="attached")
    assert service.name in page.text_content("#content")
    _settle(browser_page)
    assert browser_page.policy_breaks() == []
    assert McpService.objects.filter(pk=service.pk).exists()  # confirmation only, nothing deleted
