"""The chat page end to end in headless Chromium: the real project on uvicorn, the scripted model,
the contract sub-agent, the real static files. What a student does, and what they must see.
"""
import re
import shutil
import time

import pytest
from django.conf import settings

from agents_app.runtime.loop import CUT_TEXT, MODEL_INTERRUPTED_TEXT
from agents_app.runtime.turn import MODEL_UNAVAILABLE
from chat_app.models import Conversation, Message
from subagents_app.client import HTTP_ERROR_NOTICE
from subagents_app.models import SubAgent
from testkit.fixtures.browser import cjk_font_installed
from testkit.model.fake_llm import Reply

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

QUESTION = "今天一食堂有什么好吃的？"
ANSWER = "一食堂今天推荐：\n\n- **红烧肉**（12 元）\n- 番茄炒蛋（6 元）\n\n各食堂人数见下图，错峰就餐更舒服。"

# What the pane shows, reduced to what a student can see: used to compare live and reloaded.
PANE_SNAPSHOT = """() => [...document.querySelectorAll('#messages .msg:not([hidden])')].map((m) => ({
    role: m.classList.contains('msg-user') ? 'user' : 'assistant',
    text: [...m.querySelectorAll('.msg-text, .segment')].map((n) => n.textContent.trim()).filter(Boolean),
    tools: [...m.querySelectorAll('.tool')].map((t) => [
        t.querySelector('.tool-name').textContent, t.dataset.state, t.querySelector('.tool-output').textContent.trim()]),
    charts: m.querySelectorAll('.chart canvas').length,
    errors: [...m.querySelectorAll('.msg-error')].map((n) => n.textContent),
    flags: [...m.querySelectorAll('.msg-flag')].map((n) => n.textContent),
}))"""

CANVAS_PAINTED = """() => {
    const canvas = document.querySelector('#messages .chart canvas');
    if (!canvas || !canvas.width || !canvas.height) return false;
    const { data } = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height);
    let painted = 0;
    for (let i = 3; i < data.length; i += 4) if (data[i] > 0) painted++;
    return painted > 500;  // bars, axes and labels, not a stray pixel
}"""

INERT_DOM = """() => ({
    xss: window.__xss === undefined ? null : window.__xss,
    scripts: document.querySelectorAll('#messages script').length,
    handlers: [...document.querySelectorAll('#messages *')].flatMap(
        (n) => [...n.attributes].filter((a) => a.name.startsWith('on')).map((a) => a.name)),
    badLinks: [...document.querySelectorAll('#messages [href], #messages [src]')]
        .map((n) => n.getAttribute('href') || n.getAttribute('src'))
        .filter((u) => /^\\s*(javascript|data):/i.test(u) || !u.startsWith('/') && !u.startsWith('http')),
    images: document.querySelectorAll('#messages img').length,
})"""


@pytest.fixture
def chat(browser_page, user, password, agent, llm_settings, subagent_server):
    """A logged-in page; the default agent may call the contract sub-agent `canteen`."""
    subagent_server.chunk_delay = 0.12  # slow enough to watch the sub-agent's text arrive
    browser_page.sign_in(user)
    return browser_page


def _ask(page, text: str) -> None:
    page.fill("#input", text)
    page.press("#input", "Enter")


def _wait_answered(page) -> None:
    page.wait_for_function("() => !document.getElementById('app').classList.contains('streaming')"
                           " && document.querySelector('#messages .msg-assistant.done')")


def _stored_rows(conversation_id) -> list[Message]:
    return list(Message.objects.filter(conversation_id=conversation_id).order_by("created_at", "seq"))


def test_a_question_routed_to_a_sub_agent_streams_live_and_reloads_the_same(chat, llm_settings):
    llm_settings.reply_tool_calls(("call_canteen", {"message": "一食堂今日菜单"}))
    llm_settings.queue(Reply(text=ANSWER, chunk_delay=0.04))
    page = chat.page

    _ask(page, QUESTION)

    # The chip runs, and the sub-agent's own text shows under it before the tool has finished.
    page.wait_for_selector(".tool[data-state=running]")
    assert page.is_disabled("#input") and page.is_visible("#stop") and not page.is_visible("#send")
    page.wait_for_function(
        """() => { const t = document.querySelector('.tool');
                   return t.dataset.state === 'running' && t.querySelector('.tool-output').textContent.includes('已收到'); }"""
    )
    assert page.text_content(".tool .tool-name") == "食堂助手"  # the name staff gave it, not call_canteen
    # The model's answer arrives in pieces: part of it is on screen while the stream is still open.
    page.wait_for_function(
        """() => { const s = [...document.querySelectorAll('.msg-assistant .segment')].pop();
                   return s && s.textContent.length > 0 && !s.textContent.includes('错峰就餐')
                          && document.getElementById('app').classList.contains('streaming'); }"""
    )
    _wait_answered(page)

    assert page.get_attribute(".tool", "data-state") == "done"
    assert not page.is_disabled("#input") and page.evaluate("document.activeElement.id") == "input"
    page.focus(".tool summary")
    page.keyboard.press("Enter")  # the chip expands from the keyboard to the sub-agent's full text
    assert page.get_attribute(".tool", "open") is not None and page.is_visible(".tool .tool-output")
    assert "子Agent已收到：一食堂今日菜单。这是查询结果。" in page.text_content(".tool .tool-output")
    assert page.inner_html(".msg-assistant .segment strong") == "红烧肉"  # markdown rendered
    page.wait_for_function(CANVAS_PAINTED)

    conversation = Conversation.objects.get(user__username="20230001")
    assert page.url.endswith(f"/c/{conversation.id}/")
    assert page.text_content("#conversation-list li.active a") == QUESTION
    rows = _stored_rows(conversation.id)
    assert [r.role for r in rows] == ["user", "assistant", "tool", "assistant"]
    assert rows[-1].chart is not None

    live = page.evaluate(PANE_SNAPSHOT)
    assert live[1]["tools"][0][1] == "done" and live[1]["charts"] == 1 and not live[1]["flags"]
    page.reload()
    chat.chat_ready()
    page.wait_for_function(CANVAS_PAINTED)
    assert page.evaluate(PANE_SNAPSHOT) == live
    assert page.text_content("#conversation-list li.active a") == QUESTION
    chat.screenshot("chat-desktop")


def test_xss_in_model_and_sub_agent_output_is_inert(chat, llm_settings):
    chat.hostile_markup = True
    sub_agent_payload = '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>'
    llm_settings.reply_tool_calls(("call_canteen", {"message": sub_agent_payload}))
    llm_settings.reply_text(
        '结果如下<script>window.__xss=3</script><img src=x onerror="window.__xss=4">'
        "[点这里](javascript:window.__xss=5) ![t](https://tracker.example.com/p.gif)"
        '<a href="data:text/html,<script>alert(1)</script>">数据</a>'
    )
    page = chat.page

    _ask(page, '<b onmouseover="window.__xss=6">我的问题</b>')
    _wait_answered(page)
    page.click(".tool summary")
    page.hover(".msg-user")
    page.wait_for_timeout(200)  # time for any injected handler to fire

    live = page.evaluate(INERT_DOM)
    assert live == {"xss": None, "scripts": 0, "handlers": [], "badLinks": [], "images": 0}
    assert '<b onmouseover="window.__xss=6">我的问题</b>' in page.text_content(".msg-user .msg-text")  # shown as typed
    assert "结果如下" in page.text_content(".msg-assistant .segment")
    assert "子Agent已收到" in page.text_content(".tool-output")

    page.reload()
    chat.chat_ready()
    page.click(".tool summary")
    page.wait_for_timeout(200)
    assert page.evaluate(INERT_DOM) == live


def test_stop_mid_stream_keeps_the_partial_reply_marked_interrupted(chat, llm_settings):
    long_answer = "".join(f"第{i}段：食堂营业时间为早上六点半到晚上八点。" for i in range(40))
    llm_settings.queue(Reply(text=long_answer, chunk_delay=0.05, chunk_size=3))
    page = chat.page

    # Shift+Enter adds a line; Enter sends.
    page.fill("#input", "第一行")
    page.press("#input", "Shift+Enter")
    page.type("#input", "第二行")
    assert page.input_value("#input") == "第一行\n第二行"
    page.press("#input", "Enter")
    page.wait_for_function("() => (document.querySelector('.msg-assistant .segment')?.textContent || '').length > 20")
    page.click("#stop")

    page.wait_for_selector(".msg-assistant .msg-flag")
    assert page.text_content(".msg-assistant .msg-flag") == "（已中断）"
    assert not page.is_disabled("#input") and not page.is_visible("#stop")
    assert page.text_content(".msg-user .msg-text") == "第一行\n第二行"
    shown = page.text_content(".msg-assistant .segment").strip()
    assert 0 < len(shown) < len(long_answer)

    # The stop button asked the server to stop the run (docs/design.md#runs): it stored what was said so
    # far, marked interrupted.
    conversation = Conversation.objects.get(user__username="20230001")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        final = [r for r in _stored_rows(conversation.id) if r.role == "assistant"]
        if final:
            break
        time.sleep(0.1)
    assert final and final[-1].meta.get("interrupted") is True
    assert long_answer.startswith(final[-1].content) and 0 < len(final[-1].content) < len(long_answer)

    page.goto(f"{chat.base_url}/c/{conversation.id}/")
    chat.chat_ready()
    assert page.text_content(".msg-assistant .msg-flag") == "（已中断）"
    assert page.text_content(".msg-assistant .segment").strip() == final[-1].content


def test_failures_are_shown_inline_in_plain_chinese(chat, llm_settings, settings):
    settings.KEYWORD_FALLBACK_ENABLED = False
    llm_settings.reply_tool_calls(("call_canteen", {"message": "[[mode:http500]] 菜单"}))
    llm_settings.reply_text("食堂服务暂时查不到。")
    page = chat.page

    _ask(page, "食堂菜单")
    _wait_answered(page)
    assert page.get_attribute(".tool", "data-state") == "failed"
    assert page.text_content(".tool .tool-state") == "失败"
    page.click(".tool summary")
    # The student reads a sentence naming the service, not the HTTP status meant for the model.
    assert HTTP_ERROR_NOTICE.format(label="食堂助手") in page.text_content(".tool .tool-output")

    # The model's stream is cut mid-answer: the `done` frame says so and the reply is flagged
    # at once (before, only a reload showed the flag, from the stored row).
    cut_answer = "食堂今天营业到晚上八点，夜宵窗口开到十点半。"
    llm_settings.queue(Reply(text=cut_answer, chunk_size=4, drop_after_chunks=3))
    _ask(page, "食堂几点关门")
    _wait_answered(page)
    assert page.text_content(".exchange:last-child .msg-assistant:not([hidden]) .msg-error") == MODEL_INTERRUPTED_TEXT
    assert page.text_content(".exchange:last-child .msg-assistant:not([hidden]) .msg-flag") == "（已中断）"
    shown = page.text_content(".exchange:last-child .msg-assistant:not([hidden]) .segment").strip()
    assert shown and cut_answer.startswith(shown) and shown != cut_answer

    # The model itself stops at its length limit (`finish_reason: length`): the reply is whole as
    # far as it goes, and the student is told it is cut and why, live and after a reload.
    llm_settings.queue(Reply(text="夜宵窗口的菜单有：炒粉、", finish_reason="length"))
    _ask(page, "夜宵有什么")
    _wait_answered(page)
    last = ".exchange:last-child .msg-assistant:not([hidden])"
    assert page.text_content(f"{last} .msg-error") == CUT_TEXT["length"]
    assert page.text_content(f"{last} .msg-flag") == "（已中断）"
    assert page.text_content(f"{last} .segment").strip() == "夜宵窗口的菜单有：炒粉、"
    page.reload()
    chat.chat_ready()
    assert page.text_content(f"{last} .msg-error") == CUT_TEXT["length"]
    assert page.text_content(f"{last} .msg-flag") == "（已中断）"

    llm_settings.fail(500)  # the model itself is down and keyword routing is off
    _ask(page, "再试一次")
    _wait_answered(page)
    assert page.text_content(".exchange:last-child .msg-assistant:not([hidden]) .msg-error") == MODEL_UNAVAILABLE

    page.context.clear_cookies()  # the session is gone (expired, logged out elsewhere)
    _ask(page, "还在吗")
    _wait_answered(page)
    assert page.text_content(".exchange:last-child .msg-assistant:not([hidden]) .msg-error") == "登录已失效，请刷新页面重新登录。"
    # Chromium logs every 4xx response it loads; this one is the point of the step.
    chat.errors[:] = [e for e in chat.errors if "status of 401" not in e]
    chat.screenshot("chat-errors")


def test_phone_width_sidebar_delete_and_logout(chat, user, agent):
    keep = Conversation.objects.create(user=user, agent=agent, title="保留的对话")
    doomed = Conversation.objects.create(user=user, agent=agent, title="要删除的对话")
    page = chat.page
    page.set_viewport_size({"width": 390, "height": 844})
    page.reload()
    chat.chat_ready()

    assert not page.is_visible("#sidebar") and page.is_visible("#menu-toggle")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")  # no sideways scroll
    page.click("#menu-toggle")
    page.wait_for_function("() => document.getElementById('sidebar').getBoundingClientRect().left >= 0")  # slid in
    titles = page.eval_on_selector_all("#conversation-list a", "els => els.map((e) => e.textContent)")
    assert titles == ["要删除的对话", "保留的对话"]  # newest first
    chat.screenshot("chat-phone-sidebar")

    page.click(f"li[data-id='{doomed.id}'] .delete-conversation")
    page.wait_for_selector(f"li[data-id='{doomed.id}']", state="detached")
    assert list(Conversation.objects.filter(user=user).values_list("title", flat=True)) == ["保留的对话"]

    page.keyboard.press("Escape")
    page.wait_for_selector("#sidebar", state="hidden")
    page.click("#menu-toggle")
    page.click("#logout")
    page.wait_for_url(re.compile(r"/login/"))
    chat.screenshot("login-phone")
    page.goto(f"{chat.base_url}/c/{keep.id}/")
    page.wait_for_url(re.compile(r"/login/\?next="))


def test_demo_canteen_conversation_for_the_readme(chat, llm_settings, live_site):
    """The shipped demo canteen sub-agent (served by the project itself) answers through the page:
    a markdown table under the chip and its chart. The screenshot goes to docs/ for the README."""
    SubAgent.objects.filter(name="canteen").update(base_url=f"{live_site}/demo/subagents/canteen")
    llm_settings.reply_tool_calls(("call_canteen", {"message": "二食堂午饭吃什么"}), text="我帮你查一下二食堂的午餐。")
    llm_settings.queue(Reply(
        text="二食堂今天午餐有 **4 道菜**，最实惠的是凉拌黄瓜（3 元）；想吃得清淡些可以问我“低卡”的菜。",
        chunk_delay=0.02,
    ))
    page = chat.page

    _ask(page, "二食堂中午吃什么？")
    _wait_answered(page)
    page.click(".tool summary")

    assert page.get_attribute(".tool", "data-state") == "done"
    assert page.is_visible(".tool-output table")  # the sub-agent's markdown table, sanitized and rendered
    assert "第二食堂" in page.text_content(".tool-output")
    page.wait_for_function(CANVAS_PAINTED)
    page.set_viewport_size({"width": 1280, "height": 1000})  # the whole answer, chart included
    page.wait_for_timeout(400)  # let the chart's short entry animation (and resize) finish
    shot = chat.screenshot("chat-demo")
    if cjk_font_installed():  # without one the picture shows boxes instead of Chinese: keep the committed one
        shutil.copyfile(shot, settings.BASE_DIR / "docs" / "screenshot-chat.png")


def test_reload_mid_answer_reattaches_and_a_second_tab_follows_the_same_run(chat, llm_settings):
    """The answer belongs to the server (docs/design.md#runs): a reload shows what was said, then goes on
    live; a second tab on the same conversation follows the same run; nothing is cut."""
    long_answer = "".join(f"第{i}条：图书馆周末开放到晚上十点。" for i in range(30))
    llm_settings.queue(Reply(text=long_answer, chunk_delay=0.05, chunk_size=4))
    page = chat.page
    _ask(page, "图书馆几点关门")
    page.wait_for_function("() => (document.querySelector('.msg-assistant .segment')?.textContent || '').length > 20")
    page.wait_for_url(re.compile(r"/c/[0-9a-f-]+/"))
    conversation_url = page.url

    page.reload()
    chat.chat_ready()
    second = page.context.new_page()
    second.goto(conversation_url)
    second.wait_for_selector("#app[data-ready=true]")
    for tab in (page, second):
        _wait_answered(tab)
        snapshot = tab.evaluate(PANE_SNAPSHOT)
        assert [m["role"] for m in snapshot] == ["user", "assistant"]
        assert snapshot[1]["text"] == [long_answer] and snapshot[1]["flags"] == [] and snapshot[1]["errors"] == []
    second.close()

    conversation = Conversation.objects.get(user__username="20230001")
    final = [r for r in _stored_rows(conversation.id) if r.role == "assistant"]
    assert len(final) == 1 and final[0].content == long_answer and "interrupted" not in final[0].meta


def test_the_keyless_demo_for_the_readme(browser_page, user, password, settings, live_site):
    """What `scripts/run.sh` shows on a fresh machine, no model configured: the demo catalog
    (`load_demo`), the question answered by keyword routing through the demo canteen sub-agent,
    which the project serves itself. The screenshot goes to docs/ for the README."""
    from io import StringIO

    from django.core.management import call_command

    from agents_app.runtime.fallback import UNCONFIGURED_NOTICE

    settings.LLM_BASE_URL = ""
    settings.DEMO_BASE_URL = f"{live_site}/demo/subagents"
    call_command("load_demo", "--no-users", stdout=StringIO())
    browser_page.login(username=user.username, password=password)
    page = browser_page.page

    _ask(page, "二食堂晚饭有什么便宜的")
    _wait_answered(page)
    answer = page.text_content("#messages .msg-assistant.done")
    assert str(UNCONFIGURED_NOTICE).split("“")[0].strip() in answer  # （未配置 AI 模型，以下内容由关键词匹配自动转给
    assert "第二食堂" in answer
    page.wait_for_function(CANVAS_PAINTED)
    page.set_viewport_size({"width": 1280, "height": 1000})
    page.wait_for_timeout(400)  # the chart's entry animation and the resize
    shot = browser_page.screenshot("demo-keyless")
    if cjk_font_installed():  # without one the picture shows boxes instead of Chinese: keep the committed one
        shutil.copyfile(shot, settings.BASE_DIR / "docs" / "screenshot-demo-fallback.png")
