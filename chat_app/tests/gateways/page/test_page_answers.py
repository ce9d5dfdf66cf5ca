"""What a student does with an answer, in Chromium at desktop and phone sizes (issue 13): copy
its markdown, regenerate it (earlier answers kept as versions, after a reload too), edit and
resend the last question, rate it with a comment, retry a failed turn, wait out a 429, the
character counter instead of a silent cut, and the turns an app brought along marked as its."""
import openai
import pytest
from django.core.cache import cache

from chat_app.accounts.api_keys import api_key_create
from chat_app.models import Conversation, Feedback, Message
from testkit.web.page_helpers import LAST_ANSWER, VIEWPORT_IDS, VIEWPORTS, ask, sized, wait_answered

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

FIRST = "一食堂今天推荐 **红烧肉**（12 元）。"
SECOND = "换个说法：一食堂的 `红烧肉` 最受欢迎。"
SHOWN = f"""() => ({{
    question: document.querySelector('.exchange:last-child .msg-user .msg-text').textContent,
    answer: document.querySelector('{LAST_ANSWER} .segment')?.textContent.trim() ?? null,
    count: document.querySelector('{LAST_ANSWER} .version-count')?.textContent ?? null,
    exchanges: document.querySelectorAll('.exchange').length,
}})"""


@pytest.fixture
def chat(browser_page, user, password, agent, llm_settings):
    browser_page.sign_in(user)
    return browser_page


def _conversation() -> Conversation:
    return Conversation.objects.get(user__username="20230001")


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=VIEWPORT_IDS)
def test_copy_puts_the_markdown_source_on_the_clipboard(chat, llm_settings, viewport):
    page = sized(chat, viewport)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=chat.base_url)
    llm_settings.reply_text(FIRST + "\n\n```python\nprint('你好')\n```")
    ask(page, "一食堂吃什么")
    wait_answered(page)

    page.click(f"{LAST_ANSWER} [data-action=copy]")
    page.wait_for_function(f"() => document.querySelector('{LAST_ANSWER} [data-action=copy]').textContent === '已复制'")
    # The answer's markdown, and its label after a blank line (docs/safety.md, "Labels").
    assert page.evaluate("navigator.clipboard.readText()") == FIRST + "\n\n```python\nprint('你好')\n```\n\n（内容由 AI 生成）"
    # The code block has its own copy button, and is highlighted.
    assert page.is_visible(f"{LAST_ANSWER} .code-block .hljs-built_in, {LAST_ANSWER} .code-block .hljs-string")
    page.click(f"{LAST_ANSWER} .code-copy")
    page.wait_for_function(f"() => document.querySelector('{LAST_ANSWER} .code-copy').textContent === '已复制'")
    assert page.evaluate("navigator.clipboard.readText()") == "print('你好')\n"


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=VIEWPORT_IDS)
def test_regenerate_keeps_the_earlier_answer_as_a_version(chat, llm_settings, viewport):
    page = sized(chat, viewport)
    llm_settings.reply_text(FIRST)
    ask(page, "一食堂吃什么")
    wait_answered(page)
    assert page.evaluate(SHOWN)["count"] is None  # one version: no pager

    llm_settings.reply_text(SECOND)
    page.click(f"{LAST_ANSWER} [data-action=regenerate]")
    page.wait_for_function(f"() => document.querySelector('{LAST_ANSWER} .version-count')?.textContent === '2/2'")
    wait_answered(page)
    assert page.evaluate(SHOWN) == {"question": "一食堂吃什么", "answer": "换个说法：一食堂的 红烧肉 最受欢迎。",
                                    "count": "2/2", "exchanges": 1}
    # The model was asked the question again, without the answer being replaced.
    sent = [m["content"] for m in llm_settings.last_request.messages if m["role"] != "system"]
    assert sent == ["一食堂吃什么"]

    page.click(f"{LAST_ANSWER} .version-prev")
    assert page.evaluate(SHOWN)["answer"] == "一食堂今天推荐 红烧肉（12 元）。"
    assert page.evaluate(SHOWN)["count"] == "1/2"
    assert page.is_disabled(f"{LAST_ANSWER} .version-prev")

    rows = list(Message.objects.filter(conversation=_conversation()).order_by("created_at", "seq"))
    assert [(r.role, r.content, r.superseded) for r in rows] == [
        ("user", "一食堂吃什么", True), ("assistant", FIRST, True),
        ("user", "一食堂吃什么", False), ("assistant", SECOND, False),
    ]
    page.reload()
    chat.chat_ready()
    assert page.evaluate(SHOWN)["count"] == "2/2" and page.evaluate(SHOWN)["answer"].startswith("换个说法")
    page.click(f"{LAST_ANSWER} .version-prev")
    assert page.evaluate(SHOWN)["answer"] == "一食堂今天推荐 红烧肉（12 元）。"


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=VIEWPORT_IDS)
def test_edit_and_resend_the_last_question(chat, llm_settings, viewport):
    page = sized(chat, viewport)
    llm_settings.reply_text("一食堂有红烧肉。")
    ask(page, "一食堂吃什么")
    wait_answered(page)
    llm_settings.reply_text("二食堂有番茄炒蛋。")
    ask(page, "二食堂吃什么")
    wait_answered(page, count=2)
    # Only the last question can be edited.
    assert page.is_hidden(".exchange:first-child .edit-question")

    llm_settings.reply_text("二食堂晚饭有饺子。")
    page.click(".exchange:last-child .edit-question")
    page.fill(".question-editor textarea", "二食堂晚饭吃什么")
    page.click(".question-editor .btn-primary")
    page.wait_for_function(f"() => document.querySelector('{LAST_ANSWER} .version-count')?.textContent === '2/2'")
    wait_answered(page, count=2)
    assert page.evaluate(SHOWN) == {"question": "二食堂晚饭吃什么", "answer": "二食堂晚饭有饺子。", "count": "2/2",
                                    "exchanges": 2}
    sent = [m["content"] for m in llm_settings.last_request.messages if m["role"] != "system"]
    assert sent == ["一食堂吃什么", "一食堂有红烧肉。", "二食堂晚饭吃什么"]
    page.click(f"{LAST_ANSWER} .version-prev")
    assert page.evaluate(SHOWN)["question"] == "二食堂吃什么"  # the earlier version with its own question

    page.reload()
    chat.chat_ready()
    assert page.evaluate(SHOWN) == {"question": "二食堂晚饭吃什么", "answer": "二食堂晚饭有饺子。", "count": "2/2",
                                    "exchanges": 2}


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=VIEWPORT_IDS)
def test_thumbs_with_a_comment_are_stored_and_shown_again(chat, llm_settings, viewport):
    page = sized(chat, viewport)
    llm_settings.reply_text(FIRST)
    ask(page, "一食堂吃什么")
    wait_answered(page)
    answer = Message.objects.get(conversation=_conversation(), role="assistant")

    page.click(f"{LAST_ANSWER} .rate-down")
    page.wait_for_selector(f"{LAST_ANSWER} .feedback-form textarea")
    assert page.get_attribute(f"{LAST_ANSWER} .rate-down", "aria-pressed") == "true"
    page.fill(f"{LAST_ANSWER} .feedback-form textarea", "价格不对，今天 15 元")
    page.click(f"{LAST_ANSWER} .feedback-form .btn-primary")
    page.wait_for_selector(f"{LAST_ANSWER} .feedback-thanks")
    row = Feedback.objects.get()
    assert (row.message_id, row.rating, row.comment) == (answer.id, "down", "价格不对，今天 15 元")

    page.reload()
    chat.chat_ready()
    assert page.get_attribute(f"{LAST_ANSWER} .rate-down", "aria-pressed") == "true"
    page.click(f"{LAST_ANSWER} .rate-up")  # changing one's mind replaces the rating
    page.wait_for_function(f"() => document.querySelector('{LAST_ANSWER} .rate-up').getAttribute('aria-pressed') === 'true'")
    assert Feedback.objects.get().rating == "up"
    page.click(f"{LAST_ANSWER} .feedback-form .btn-ghost")  # no comment this time
    page.click(f"{LAST_ANSWER} .rate-up")  # pressed again: taken back
    page.wait_for_function(f"() => document.querySelector('{LAST_ANSWER} .rate-up').getAttribute('aria-pressed') === 'false'")
    assert not Feedback.objects.exists()


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=VIEWPORT_IDS)
def test_a_failed_turn_offers_retry(chat, llm_settings, settings, viewport):
    settings.KEYWORD_FALLBACK_ENABLED = False
    page = sized(chat, viewport)
    llm_settings.fail(500)
    ask(page, "图书馆几点关门")
    wait_answered(page)
    assert page.is_visible(f"{LAST_ANSWER} .msg-error") and page.is_visible(f"{LAST_ANSWER} .retry")
    # One action under a failed answer (issue 20 point 11): 重试, not 重试 and 重新生成 side by side.
    assert page.locator(f"{LAST_ANSWER} [data-action=regenerate]").count() == 0

    llm_settings.reply_text("图书馆晚上十点关门。")
    page.click(f"{LAST_ANSWER} .retry")
    page.wait_for_function(f"() => document.querySelector('{LAST_ANSWER} .version-count')?.textContent === '2/2'")
    wait_answered(page)
    assert page.evaluate(SHOWN)["answer"] == "图书馆晚上十点关门。"
    assert page.is_hidden(f"{LAST_ANSWER} .retry")


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=VIEWPORT_IDS)
def test_a_429_counts_down_then_retries_the_same_question(chat, llm_settings, settings, viewport):
    settings.CHAT_RATE_PER_MINUTE = 1
    page = sized(chat, viewport)
    page.clock.install()
    llm_settings.reply_text("第一次回答。")
    ask(page, "第一个问题")
    wait_answered(page)

    ask(page, "第二个问题")
    page.wait_for_selector(f"{LAST_ANSWER} .retry")
    assert page.text_content(f"{LAST_ANSWER} .msg-error") == "发送太频繁，请稍后再试。"
    assert page.is_disabled(f"{LAST_ANSWER} .retry")
    assert page.text_content(f"{LAST_ANSWER} .retry") == "重试（60 秒后可重试）"
    page.clock.run_for(1000)
    assert page.text_content(f"{LAST_ANSWER} .retry") == "重试（59 秒后可重试）"
    # Chromium logs the refused request; that is the point of this step.
    chat.errors[:] = [e for e in chat.errors if "status of 429" not in e]

    cache.clear()  # the minute's window is over
    page.clock.run_for(60_000)
    assert not page.is_disabled(f"{LAST_ANSWER} .retry")
    llm_settings.reply_text("第二次回答。")
    page.click(f"{LAST_ANSWER} .retry")
    wait_answered(page, count=2)
    assert page.evaluate(SHOWN) == {"question": "第二个问题", "answer": "第二次回答。", "count": None, "exchanges": 2}
    assert [r.content for r in Message.objects.filter(role="user").order_by("created_at")] == ["第一个问题", "第二个问题"]


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=VIEWPORT_IDS)
def test_a_long_paste_is_counted_and_refused_with_a_notice_not_cut(chat, llm_settings, viewport):
    page = sized(chat, viewport)
    page.fill("#input", "字" * 7000)
    assert page.text_content("#input-limit") == ""  # no counter far from the limit
    page.fill("#input", "字" * 7500)
    assert page.text_content("#input-limit") == "7500 / 8000"
    page.fill("#input", "长" * 9000)
    assert len(page.input_value("#input")) == 9000  # nothing cut
    assert page.text_content("#input-limit") == "9000 / 8000"
    assert page.text_content("#status") == "问题超过 8000 字（多了 1000 字），请删减后再发送。"
    assert page.is_disabled("#send")
    page.press("#input", "Enter")
    assert page.query_selector(".exchange") is None and not Message.objects.exists()

    page.fill("#input", "长" * 8000)
    assert not page.is_disabled("#send") and page.text_content("#status") == ""
    llm_settings.reply_text("收到。")
    page.press("#input", "Enter")
    wait_answered(page)
    assert len(Message.objects.get(role="user").content) == 8000


def test_a_chat_an_app_brought_along_is_marked_as_the_apps(chat, llm_settings, user):
    """A conversation opened through /v1 by a client's own history (docs/clients.md): on the page
    its earlier turns say they came from the app, and only our answer can be rated."""
    key = api_key_create(user=user, name="Chatbox")[1]
    llm_settings.reply_text("你叫张三。")
    with openai.OpenAI(base_url=f"{chat.base_url}/v1", api_key=key, max_retries=0, timeout=20) as sdk:
        raw = sdk.chat.completions.with_raw_response.create(model="xiaozhi", messages=[
            {"role": "user", "content": "我叫张三"}, {"role": "assistant", "content": "你好张三！"},
            {"role": "user", "content": "我叫什么？"}])
    page = chat.page
    page.goto(f"{chat.base_url}/c/{raw.headers['x-conversation-id']}/")
    chat.chat_ready()

    marks = page.eval_on_selector_all(".exchange", """(nodes) => nodes.map((n) => ({
        question: n.querySelector('.msg-user .msg-text').textContent,
        mark: n.querySelector('.msg-user .msg-flag')?.textContent ?? null,
        rates: n.querySelectorAll('[data-action=rate]').length,
        labels: n.querySelectorAll('.ai-label').length}))""")
    # The app's own answer is not ours to label 「内容由 AI 生成」 (docs/safety.md, "Labels").
    assert marks == [{"question": "我叫张三", "mark": "（来自你所用客户端的聊天记录）", "rates": 0, "labels": 0},
                     {"question": "我叫什么？", "mark": None, "rates": 2, "labels": 1}]
