"""The page audited for accessibility (issue 26 point 3): axe-core, the engine Deque maintains and
browsers' own audits build on, run inside headless Chromium on what a student sees — the login
page, the chat page with an answer (a tool chip, a chart, the answer's actions) in light and dark
and on a phone, a tool call waiting for approval, and a thinking model's reasoning block, folded
and open. Every serious or critical violation of WCAG 2.2 A/AA fails the test, with what axe says
and where.

axe-core comes from PyPI (`axe-playwright-python`, which bundles its `axe.min.js`): no Node in
the test run. The script is evaluated through the DevTools protocol, so the page's
Content-Security-Policy (no inline script) does not stop it, as it would a <script> tag."""
import json

import pytest
from axe_playwright_python.base import AXE_SCRIPT

from testkit.model.fake_llm import Reply
from testkit.web.page_helpers import DESKTOP, LAST_ANSWER, PHONE, ask, sized, wait_answered

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WCAG_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa"]
FAILING_IMPACTS = ("serious", "critical")


def serious_violations(page) -> list[str]:
    """axe-core's serious and critical WCAG violations on the page as it is now, one line each:
    the rule, what it asks, and the elements that break it."""
    page.evaluate(AXE_SCRIPT)
    options = {"runOnly": {"type": "tag", "values": WCAG_TAGS}, "resultTypes": ["violations"]}
    results = page.evaluate(f"axe.run(document, {json.dumps(options)})")
    return [
        f"{v['id']} ({v['impact']}): {v['help']} — " + "; ".join(
            f"{' '.join(node['target'])}: {node.get('failureSummary', '').splitlines()[-1].strip()}"
            for node in v["nodes"][:5])
        for v in results["violations"] if v["impact"] in FAILING_IMPACTS
    ]


@pytest.fixture
def chat(browser_page, user, password, agent, llm_settings, subagent_server):
    browser_page.sign_in(user)
    return browser_page


def test_the_login_page_has_no_serious_violation(browser_page):
    browser_page.goto("/login/")
    browser_page.page.wait_for_selector("#login-title")
    assert serious_violations(browser_page.page) == []


@pytest.mark.parametrize(("viewport", "scheme"), [(DESKTOP, "light"), (DESKTOP, "dark"), (PHONE, "light")],
                         ids=["light", "dark", "phone"])
def test_an_answer_with_a_tool_and_a_chart_has_no_serious_violation(chat, llm_settings, viewport, scheme):
    page = sized(chat, viewport)
    page.emulate_media(color_scheme=scheme)
    llm_settings.reply_tool_calls(("call_canteen", {"message": "二食堂午饭"}), text="我查一下。")
    llm_settings.reply_text("二食堂今天有**红烧肉**（12 元）。")
    ask(page, "二食堂中午吃什么？")
    wait_answered(page)
    page.click(f"{LAST_ANSWER} .tool summary")  # the sub-agent's text and chart, open
    assert serious_violations(page) == []


def test_a_call_waiting_for_approval_has_no_serious_violation(chat, agent, llm_settings):
    agent.sub_agents.update(approval_policy="ask")
    page = chat.page
    llm_settings.reply_tool_calls(("call_canteen", {"message": "订一份午饭"}), text="这会替你下单，需要确认。")
    ask(page, "帮我订午饭")
    page.wait_for_selector(".tool[data-state=waiting] .approval")
    assert serious_violations(page) == []


def test_the_reasoning_block_folded_and_open_has_no_serious_violation(chat, llm_settings):
    page = chat.page
    llm_settings.queue(Reply(reasoning="学生问今晚吃什么。\n二食堂有红烧肉。", text="今晚二食堂有**红烧肉**。"))
    ask(page, "今晚吃什么")
    wait_answered(page)
    page.wait_for_selector(f"{LAST_ANSWER} .reasoning:not([open])")
    assert serious_violations(page) == []
    page.click(f"{LAST_ANSWER} .reasoning summary")
    page.wait_for_selector(f"{LAST_ANSWER} .reasoning[open]")
    assert serious_violations(page) == []


TAB_LIMIT = 60  # more stops than the page has: a control the loop never reaches is not reachable


def tab_to(page, selector: str) -> None:
    """Moves the focus with the Tab key alone until it is on `selector` (fails if it never is)."""
    for _ in range(TAB_LIMIT):
        if page.evaluate(f"() => document.activeElement?.matches({json.dumps(selector)}) || false"):
            return
        page.keyboard.press("Tab")
    raise AssertionError(f"Tab never reached {selector}")


def test_a_student_with_only_a_keyboard_sends_stops_approves_opens_the_reasoning_and_attaches(chat, agent, llm_settings,
                                                                                  settings, tmp_path):
    import threading

    settings.MEDIA_ROOT = str(tmp_path / "media")
    page = chat.page
    page.evaluate("() => document.activeElement?.blur()")

    # Send, then stop mid-answer.
    release = threading.Event()
    llm_settings.queue(Reply(text="第一段：食堂营业到晚上八点。" * 20, chunk_size=3, hold_after_chunks=3, release=release))
    tab_to(page, "#input")
    page.keyboard.type("食堂几点关门")
    page.keyboard.press("Enter")
    # Stop once the model is answering: a stop that came before its request would leave the
    # held reply queued for the next question (a loaded machine did that once).
    page.wait_for_function(f"() => document.querySelector('{LAST_ANSWER}')?.textContent.includes('第一段')")
    tab_to(page, "#stop")
    page.keyboard.press("Enter")
    page.wait_for_selector(f"{LAST_ANSWER} .msg-flag")
    release.set()
    assert page.text_content(f"{LAST_ANSWER} .msg-flag") == "（已中断）"

    # An ask-first call, approved from the keyboard.
    agent.sub_agents.update(approval_policy="ask")
    llm_settings.reply_tool_calls(("call_canteen", {"message": "订一份午饭"}), text="这会替你下单，需要确认。")
    llm_settings.reply_text("已经为你下单。")
    tab_to(page, "#input")
    page.keyboard.type("帮我订午饭")
    page.keyboard.press("Enter")
    page.wait_for_selector(".tool[data-state=waiting] .approval-approve")
    tab_to(page, ".approval-approve")
    page.keyboard.press("Enter")
    wait_answered(page, 2)
    assert "已经为你下单。" in page.text_content(LAST_ANSWER)

    # A thinking model's reasoning, opened with Enter on its summary.
    llm_settings.queue(Reply(reasoning="学生问今晚吃什么。", text="今晚二食堂有红烧肉。"))
    tab_to(page, "#input")
    page.keyboard.type("今晚吃什么")
    page.keyboard.press("Enter")
    wait_answered(page, 3)
    page.wait_for_selector(f"{LAST_ANSWER} .reasoning:not([open])")
    tab_to(page, f"{LAST_ANSWER} .reasoning summary")
    page.keyboard.press("Enter")
    page.wait_for_selector(f"{LAST_ANSWER} .reasoning[open]")

    # The paperclip, from the keyboard: Enter on 附件 opens the file picker (the browser's own
    # dialog, which a test cannot click in: the file is then given to the picker).
    choosers = []
    page.on("filechooser", lambda chooser: choosers.append(chooser))
    tab_to(page, "#attach")
    page.keyboard.press("Enter")
    for _ in range(100):  # the driver delivers the event while a call of ours is in flight
        if choosers:
            break
        page.evaluate("() => new Promise((done) => setTimeout(done, 50))")
    assert len(choosers) == 1
    page.set_input_files("#attach-picker", files=[{"name": "笔记.txt", "mimeType": "text/plain",
                                                   "buffer": "第一章".encode()}])
    page.wait_for_selector("#attachment-tray .attachment:not(.attachment-uploading) .attachment-remove")
    tab_to(page, "#attachment-tray .attachment-remove")
    page.keyboard.press("Enter")  # taken off again
    page.wait_for_selector("#attachment-tray", state="hidden")
