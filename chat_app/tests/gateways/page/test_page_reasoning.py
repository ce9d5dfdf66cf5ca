"""A thinking model's reasoning on the chat page (docs/design.md#the-tool-loop, issue 21), in headless Chromium: the
「思考过程」 block streams live and open, folds when the answer begins, is there (folded) after a
reload, reads in dark mode and fits a phone."""
import threading

import pytest

from testkit.model.fake_llm import Reply, ScriptedCall
from testkit.web.page_helpers import (
    LAST_ANSWER,
    VIEWPORT_IDS,
    VIEWPORTS,
    ask,
    no_sideways_scroll,
    sized,
    wait_answered,
)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

REASONING = "学生问今晚吃什么。\n二食堂有红烧肉，三食堂有面。"
ANSWER = "今晚二食堂有**红烧肉**。"
BLOCKS = f"""() => [...document.querySelectorAll('{LAST_ANSWER} .reasoning')].map((d) => ({{
    open: d.open,
    title: d.querySelector('.reasoning-title').textContent,
    state: d.querySelector('.reasoning-state').textContent,
    text: d.querySelector('.reasoning-text').textContent,
    markup: d.querySelectorAll('.reasoning-text *').length,
    beforeAnswer: ((segment) => !segment || Boolean(d.compareDocumentPosition(segment) & Node.DOCUMENT_POSITION_FOLLOWING))(
        document.querySelector('{LAST_ANSWER} .segment')),
}}))"""
CONTRAST = """() => {
    const rgb = (c) => c.match(/\\d+(\\.\\d+)?/g).slice(0, 3).map(Number);
    const lum = (c) => {
        const [r, g, b] = rgb(c).map((v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
        return 0.2126 * r + 0.7152 * g + 0.0722 * b;
    };
    const text = document.querySelector('.reasoning-text');
    let node = text, bg = 'rgba(0, 0, 0, 0)';
    while (node && /rgba\\(0, 0, 0, 0\\)|transparent/.test(bg)) { bg = getComputedStyle(node).backgroundColor; node = node.parentElement; }
    const [a, b] = [lum(getComputedStyle(text).color), lum(bg)].sort((x, y) => y - x);
    return (a + 0.05) / (b + 0.05);
}"""


@pytest.fixture
def chat(browser_page, user, password, agent, llm_settings, subagent_server):
    browser_page.sign_in(user)
    return browser_page


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=VIEWPORT_IDS)
def test_the_reasoning_streams_open_folds_for_the_answer_and_is_there_after_a_reload(chat, llm_settings, viewport):
    page = sized(chat, viewport)
    release = threading.Event()
    # The reasoning in 4-character pieces; the model holds before the answer until the test has looked.
    pieces = -(-len(REASONING) // 4)
    llm_settings.queue(Reply(reasoning=REASONING, text=ANSWER, chunk_size=4,
                             hold_after_chunks=1 + pieces, release=release))
    ask(page, "今晚吃什么")
    page.wait_for_function(f"() => document.querySelector('{LAST_ANSWER} .reasoning-text')?.textContent.length"
                           f" === {len(REASONING)}")
    live = page.evaluate(BLOCKS)
    assert live == [{"open": True, "title": "思考过程", "state": "思考中…", "text": REASONING, "markup": 0,
                     "beforeAnswer": True}]
    assert page.query_selector(f"{LAST_ANSWER} .segment") is None  # nothing of the answer yet
    chat.screenshot(f"reasoning-live-{VIEWPORT_IDS[VIEWPORTS.index(viewport)]}")
    release.set()
    wait_answered(page)
    folded = page.evaluate(BLOCKS)
    assert folded == [{**live[0], "open": False, "state": ""}]
    answer = page.text_content(f"{LAST_ANSWER} .segment")
    assert answer.strip() == "今晚二食堂有红烧肉。" and "红烧肉，三食堂" not in answer
    assert no_sideways_scroll(page)

    page.reload()
    chat.chat_ready()
    page.wait_for_selector(f"{LAST_ANSWER} .reasoning")
    assert page.evaluate(BLOCKS) == folded
    page.click(f"{LAST_ANSWER} .reasoning-summary")
    assert page.evaluate(BLOCKS)[0]["open"] is True
    assert no_sideways_scroll(page)
    copied = page.evaluate("() => document.querySelector('.exchange:last-child .msg-assistant .segment').textContent")
    assert REASONING not in copied


def test_reasoning_after_a_tool_round_is_a_block_of_its_own(chat, llm_settings, subagent_server):
    page = chat.page
    llm_settings.queue(
        Reply(reasoning="先问食堂。", reasoning_as="think", tool_calls=[ScriptedCall("call_canteen", {"message": "菜单"})]),
        Reply(reasoning="菜单到了。", reasoning_as="reasoning", text=ANSWER),
    )
    ask(page, "今晚吃什么")
    wait_answered(page)
    texts = [b["text"] for b in page.evaluate(BLOCKS)]
    assert texts == ["先问食堂。", "菜单到了。"]
    order = page.evaluate(f"""() => [...document.querySelectorAll('{LAST_ANSWER} .reasoning, {LAST_ANSWER} .tool')]
                                     .map((n) => n.className.split(' ')[0])""")
    assert order == ["reasoning", "tool", "reasoning"]
    page.reload()
    chat.chat_ready()
    page.wait_for_selector(f"{LAST_ANSWER} .tool")
    assert [b["text"] for b in page.evaluate(BLOCKS)] == texts


def test_the_reasoning_reads_in_dark_mode(chat, llm_settings):
    page = chat.page
    llm_settings.queue(Reply(reasoning=REASONING, text=ANSWER))
    ask(page, "今晚吃什么")
    wait_answered(page)
    page.click(f"{LAST_ANSWER} .reasoning-summary")
    light = page.evaluate("getComputedStyle(document.querySelector('.reasoning-text')).color")
    assert page.evaluate(CONTRAST) >= 4.5  # WCAG AA for its text size
    page.emulate_media(color_scheme="dark")
    page.wait_for_function("() => document.documentElement.dataset.theme === 'dark'")
    assert page.evaluate("getComputedStyle(document.querySelector('.reasoning-text')).color") != light
    assert page.evaluate(CONTRAST) >= 4.5
    chat.screenshot("reasoning-dark")
