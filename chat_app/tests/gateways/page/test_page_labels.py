"""The visible label of AI answers (issue 44 point 6; 《人工智能生成合成内容标识办法》, GB 45438-2025;
docs/safety.md, "Labels"), in Chromium at desktop and phone sizes: 「内容由 AI 生成」 under an answer
from its first streamed word, under it again after a reload, readable in light and dark, at the
end of what the copy button copies, in the page's language; and the picture for docs/safety.md."""
import shutil
import threading

import pytest
from django.conf import settings

from chat_app.models import Conversation
from testkit.fixtures.browser import cjk_font_installed
from testkit.model.fake_llm import Reply
from testkit.web.page_helpers import DESKTOP, LAST_ANSWER, VIEWPORT_IDS, VIEWPORTS, ask, sized, wait_answered

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ANSWER = "一食堂今天推荐 **红烧肉**（12 元）。"
LABEL = f"{LAST_ANSWER} .ai-label"
# The label's colour against the answer's background: WCAG's contrast ratio.
CONTRAST = f"""() => {{
    const rgb = (css) => css.match(/\\d+(\\.\\d+)?/g).slice(0, 3).map(Number);
    const lum = (css) => {{
        const [r, g, b] = rgb(css).map((v) => v / 255).map((v) => v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4);
        return 0.2126 * r + 0.7152 * g + 0.0722 * b;
    }};
    const label = document.querySelector('{LABEL}');
    const fg = lum(getComputedStyle(label).color);
    const bg = lum(getComputedStyle(label.closest('.msg-body')).backgroundColor);
    return {{ratio: (Math.max(fg, bg) + 0.05) / (Math.min(fg, bg) + 0.05),
             px: parseFloat(getComputedStyle(label).fontSize)}};
}}"""
# The label is the answer's last line: after its text, before the action bar.
PLACE = f"""() => {{
    const label = document.querySelector('{LABEL}');
    const next = label.nextElementSibling;
    return {{text: label.textContent, before: next ? next.className : null,
             after: label.previousElementSibling.className}};
}}"""


@pytest.fixture
def chat(browser_page, user, password, agent, llm_settings):
    browser_page.sign_in(user)
    return browser_page


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=VIEWPORT_IDS)
def test_an_answer_is_labelled_while_it_streams_after_a_reload_and_in_what_is_copied(chat, llm_settings, viewport):
    page = sized(chat, viewport)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=chat.base_url)
    release = threading.Event()
    llm_settings.queue(Reply(text=ANSWER + "\n\n还有番茄炒蛋。", hold_after_chunks=2, release=release))
    ask(page, "一食堂吃什么")
    try:
        # Mid-answer: the label is already under the words streamed so far.
        page.wait_for_selector(LABEL, state="visible")
        assert page.evaluate(f"document.querySelector('{LAST_ANSWER}').classList.contains('done')") is False
        assert page.evaluate(f"document.querySelector('{LABEL}').previousElementSibling.classList.contains('segment')")
    finally:
        release.set()
    wait_answered(page)
    assert page.evaluate(PLACE) == {"text": "内容由 AI 生成", "before": "msg-actions", "after": "md segment"}
    assert page.is_visible(LABEL)

    page.click(f"{LAST_ANSWER} [data-action=copy]")
    page.wait_for_function(f"() => document.querySelector('{LAST_ANSWER} [data-action=copy]').textContent === '已复制'")
    copied = ANSWER + "\n\n还有番茄炒蛋。\n\n（内容由 AI 生成）"
    assert page.evaluate("navigator.clipboard.readText()") == copied

    page.reload()
    chat.chat_ready()
    page.wait_for_selector(LABEL, state="visible")
    assert page.evaluate(PLACE) == {"text": "内容由 AI 生成", "before": "msg-actions", "after": "md segment"}
    page.click(f"{LAST_ANSWER} [data-action=copy]")
    page.wait_for_function(f"() => document.querySelector('{LAST_ANSWER} [data-action=copy]').textContent === '已复制'")
    assert page.evaluate("navigator.clipboard.readText()") == copied


def test_the_label_reads_in_light_and_dark_and_in_english(chat, llm_settings):
    page = sized(chat, DESKTOP)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=chat.base_url)
    page.emulate_media(color_scheme="light")
    llm_settings.reply_text(ANSWER)
    ask(page, "一食堂吃什么")
    wait_answered(page)
    light = page.evaluate(CONTRAST)
    assert light["ratio"] >= 4.5 and light["px"] >= 12  # small, still readable (WCAG AA)
    page.click("#theme-toggle")
    page.wait_for_function("() => document.documentElement.dataset.theme === 'dark'")
    dark = page.evaluate(CONTRAST)
    assert dark["ratio"] >= 4.5 and dark["ratio"] != light["ratio"]
    chat.screenshot("aigc-label-dark")
    page.click("#theme-toggle")

    # The picture docs/safety.md shows (light, desktop), copied there when a Chinese font is installed.
    shot = chat.screenshot("aigc-label")
    if cjk_font_installed():
        shutil.copyfile(shot, settings.BASE_DIR / "docs" / "screenshot-aigc-label.png")

    page.click("#language-switch")
    page.wait_for_selector("html[lang=en]")
    chat.goto(f"/c/{Conversation.objects.get().id}/")
    chat.chat_ready()
    page.wait_for_selector(LABEL, state="visible")
    assert page.text_content(LABEL) == "AI-generated content"
    page.click(f"{LAST_ANSWER} [data-action=copy]")
    page.wait_for_function(f"() => document.querySelector('{LAST_ANSWER} [data-action=copy]').textContent === 'Copied'")
    assert page.evaluate("navigator.clipboard.readText()") == ANSWER + "\n\n(AI-generated content)"
