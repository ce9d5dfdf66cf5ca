"""How answers read, in Chromium (issue 13): dark mode (system and toggle), wide tables scroll
sideways on a phone, chips named as staff set with the tool's own output collapsed and never
repeating the answer, the welcome built from the agent's catalog, and the README screenshots."""
import shutil
from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from agents_app.models import McpService
from chat_app.models import Conversation, Message
from subagents_app.models import SubAgent
from testkit.fixtures.browser import cjk_font_installed
from testkit.model.fake_llm import Reply
from testkit.web.page_helpers import (
    DESKTOP,
    LAST_ANSWER,
    PHONE,
    VIEWPORT_IDS,
    VIEWPORTS,
    ask,
    no_sideways_scroll,
    sized,
    wait_answered,
)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

BACKGROUND = "getComputedStyle(document.body).backgroundColor"
WIDE_TABLE = (
    "本周课表：\n\n| 节次 | 周一 | 周二 | 周三 | 周四 | 周五 | 周六 |\n|---|---|---|---|---|---|---|\n"
    "| 第一节 | 高等数学 | 大学英语 | 线性代数 | 大学物理 | 程序设计 | 体育 |\n"
    "| 第二节 | 思想政治 | 高等数学 | 大学英语 | 线性代数 | 大学物理 | 自习 |\n"
)


@pytest.fixture
def chat(browser_page, user, password, agent, llm_settings, subagent_server):
    browser_page.sign_in(user)
    return browser_page


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=VIEWPORT_IDS)
def test_dark_mode_follows_the_system_and_the_toggle_is_remembered(chat, viewport):
    page = sized(chat, viewport)
    page.emulate_media(color_scheme="dark")
    page.reload()
    chat.chat_ready()
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
    dark = page.evaluate(BACKGROUND)
    assert page.get_attribute("#theme-toggle", "aria-pressed") == "true"

    page.emulate_media(color_scheme="light")  # the system changes: the page follows
    page.wait_for_function("() => document.documentElement.dataset.theme === 'light'")
    assert page.evaluate(BACKGROUND) != dark

    page.click("#theme-toggle")  # the student's choice wins over the system from now on
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
    assert page.evaluate(BACKGROUND) == dark
    page.reload()
    chat.chat_ready()
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
    page.goto(f"{chat.base_url}/login/")  # the login page too (redirected: already logged in)
    chat.chat_ready()
    assert page.evaluate(BACKGROUND) == dark


CHART_LOOK = """() => {
    const canvas = document.querySelector('#messages .chart canvas');
    const chart = canvas && window.Chart.getChart(canvas);
    if (!chart || !canvas.width) return null;
    const css = getComputedStyle(document.documentElement);
    return {box: getComputedStyle(canvas.parentElement).backgroundColor, page: css.getPropertyValue('--panel').trim(),
            ticks: chart.options.scales.y.ticks.color, grid: chart.options.scales.x.grid.color,
            title: chart.options.plugins.title.color,
            muted: css.getPropertyValue('--muted').trim(), line: css.getPropertyValue('--line').trim(),
            text: css.getPropertyValue('--text').trim()};
}"""


def test_a_chart_follows_the_theme(chat, user, agent):
    """Issue 42: in dark mode an answer's chart stayed a white box with dark grey text."""
    conversation = Conversation.objects.create(user=user, agent=agent, title="人数")
    Message.objects.create(conversation=conversation, role="user", content="食堂人多吗")
    chart = {"type": "bar", "title": "各食堂当前人数", "labels": ["一食堂", "二食堂"],
             "datasets": [{"label": "人数", "data": [120, 80]}]}
    Message.objects.create(conversation=conversation, role="assistant", content="如下：", seq=1, chart=chart)
    page = chat.page
    page.emulate_media(color_scheme="dark")
    chat.goto(f"/c/{conversation.id}/")
    chat.chat_ready()
    page.wait_for_function(CHART_LOOK)
    dark = page.evaluate(CHART_LOOK)
    assert dark["box"] == "rgb(17, 24, 39)"  # the dark panel, not white
    assert (dark["ticks"], dark["grid"], dark["title"]) == (dark["muted"], dark["line"], dark["text"]) == (
        "#a3adbb", "#263244", "#e5e7eb")
    chat.screenshot("chart-dark")

    page.click("#theme-toggle")  # the student's choice: the drawn chart follows at once
    page.wait_for_function("() => { const l = (" + CHART_LOOK + ")(); return l && l.ticks === '#5b6472'; }")
    light = page.evaluate(CHART_LOOK)
    assert light["box"] == "rgb(255, 255, 255)" and (light["grid"], light["title"]) == ("#e3e8ef", "#1f2937")


def test_a_wide_table_scrolls_sideways_on_a_phone(chat, llm_settings):
    page = sized(chat, PHONE)
    llm_settings.reply_text(WIDE_TABLE)
    ask(page, "本周课表")
    wait_answered(page)
    table = page.evaluate(
        f"""() => {{
            const table = document.querySelector('{LAST_ANSWER} table');
            const cell = table.querySelector('td:nth-child(2)');
            const line = parseFloat(getComputedStyle(cell).lineHeight);
            return {{ scrolls: table.scrollWidth > table.clientWidth + 20,
                      cellLines: Math.round((cell.getBoundingClientRect().height - 10) / line) }};
        }}"""
    )
    assert table == {"scrolls": True, "cellLines": 1}  # 高等数学 on one line, the table scrolls
    assert no_sideways_scroll(page)  # the page itself does not
    # The keyboard hint is for keyboards: not on a phone, and the placeholder is short.
    assert page.is_hidden(".composer-keys") and page.get_attribute("#input", "placeholder") == "问点什么…"
    page.set_viewport_size(DESKTOP)
    assert page.is_visible(".composer-keys")


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=VIEWPORT_IDS)
def test_chips_show_the_names_staff_set_and_never_repeat_the_answer(chat, llm_settings, sub_agent, viewport):
    SubAgent.objects.filter(id=sub_agent.id).update(display_name="食堂小助手")
    page = sized(chat, viewport)
    page.reload()
    chat.chat_ready()
    # The model passes the sub-agent's answer on as it is: the chip has nothing else to show.
    echoed = "子Agent已收到：一食堂菜单。这是查询结果。"
    llm_settings.reply_tool_calls(("call_canteen", {"message": "一食堂菜单"}))
    llm_settings.queue(Reply(text=echoed))
    ask(page, "一食堂菜单")
    wait_answered(page)
    chip = f"{LAST_ANSWER} .tool"
    assert page.text_content(f"{chip} .tool-name") == "食堂小助手"
    assert page.get_attribute(chip, "class").split() == ["tool", "echo"]
    page.click(f"{chip} summary")
    assert page.is_hidden(f"{chip} .tool-output")
    assert page.text_content(f"{LAST_ANSWER}").count("这是查询结果") == 1

    # A summary of the tool's output: the output stays, collapsed until opened.
    llm_settings.reply_tool_calls(("call_canteen", {"message": "二食堂菜单"}))
    llm_settings.reply_text("二食堂今天有饺子。")
    ask(page, "二食堂菜单")
    wait_answered(page, count=2)
    assert "has-output" in page.get_attribute(chip, "class") and page.is_hidden(f"{chip} .tool-output")
    page.click(f"{chip} summary")
    assert "这是查询结果" in page.text_content(f"{chip} .tool-output") and page.is_visible(f"{chip} .tool-output")

    chips = "() => [...document.querySelectorAll('.tool')].map((t) => [t.className, t.textContent])"
    live = page.evaluate(chips)
    page.reload()
    chat.chat_ready()
    assert page.evaluate(chips) == live  # reloaded from stored rows, the same chips


def test_mcp_chips_use_the_service_display_name(chat, user, agent):
    McpService.objects.create(name="campus-calendar", display_name="校历", protocol="stdio", config={"command": "x"})
    conversation = Conversation.objects.create(user=user, agent=agent, title="校历")
    Message.objects.create(conversation=conversation, role="user", content="下周考试吗")
    call = {"id": "c1", "type": "function", "function": {"name": "campus-calendar__academic_calendar", "arguments": "{}"}}
    Message.objects.create(conversation=conversation, role="assistant", content="", seq=1, meta={"tool_calls": [call]})
    Message.objects.create(conversation=conversation, role="tool", content="第 18 周考试", seq=2,
                           meta={"tool_call_id": "c1", "tool": "campus-calendar__academic_calendar", "ok": True})
    Message.objects.create(conversation=conversation, role="assistant", content="下周不考试。", seq=3)
    Message.objects.create(conversation=conversation, role="user", content="别的工具", seq=4)
    Message.objects.create(conversation=conversation, role="assistant", content="", seq=5,
                           meta={"tool_calls": [{**call, "id": "c2", "function": {"name": "gone__tool", "arguments": "{}"}}]})
    page = chat.page
    page.goto(f"{chat.base_url}/c/{conversation.id}/")
    chat.chat_ready()
    assert page.eval_on_selector_all(".tool-name", "els => els.map((e) => e.textContent)") == ["校历", "工具 · gone__tool"]


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=VIEWPORT_IDS)
def test_welcome_lists_the_enabled_catalog_and_its_example_questions(chat, llm_settings, agent, agent_factory,
                                                                    sub_agent, viewport):
    SubAgent.objects.filter(id=sub_agent.id).update(
        display_name="食堂小助手", example_questions="二食堂中午吃什么？\n\n  清真食堂几点开门？ \n第三个\n"
    )
    off = SubAgent.objects.create(name="notices", description="通知助手：查通知。", base_url="http://x:1",
                                  enabled=False, example_questions="最新通知？")
    agent.sub_agents.add(off)
    agent_factory(slug="bare", name="空助手", is_default=False)
    page = sized(chat, viewport)
    page.reload()
    chat.chat_ready()

    assert page.text_content("#welcome h2") == "你好，我是校园小智"
    assert page.eval_on_selector_all(".welcome-services li", "els => els.map((e) => e.textContent)") == [
        "食堂小助手：食堂、菜单、吃什么、饭菜、营业时间"
    ]
    examples = page.eval_on_selector_all(".example-question", "els => els.map((e) => e.textContent)")
    assert examples == ["二食堂中午吃什么？", "清真食堂几点开门？"]  # two per sub-agent; the disabled one's none
    assert "通知" not in page.text_content("#welcome")

    page.select_option("#agent-select", "bare")
    assert page.text_content("#welcome h2") == "你好，我是空助手"
    assert page.is_hidden(".welcome-examples") or page.query_selector(".example-question") is None
    page.select_option("#agent-select", "xiaozhi")

    llm_settings.reply_text("二食堂中午有红烧肉。")
    page.click(".example-question >> nth=0")
    wait_answered(page)
    assert page.text_content(".exchange:last-child .msg-user .msg-text") == "二食堂中午吃什么？"
    assert page.is_hidden("#welcome")


def test_screenshots_for_the_readme(chat, user, agent, llm_settings, live_site):
    """Light and dark at 1280×800, and a phone: the demo canteen sub-agent's answer (chip, table,
    chart), a code block, dated conversations. Copied to docs/ when a Chinese font is installed."""
    SubAgent.objects.filter(name="canteen").update(
        base_url=f"{live_site}/demo/subagents/canteen", display_name="食堂助手"
    )
    now = timezone.now()
    for title, age in (("周三的课表", timedelta(hours=3)), ("图书馆开放时间", timedelta(days=1)),
                       ("选课时间", timedelta(days=3)), ("校历：什么时候放寒假", timedelta(days=20))):
        conversation = Conversation.objects.create(user=user, agent=agent, title=title)
        Conversation.objects.filter(id=conversation.id).update(updated_at=now - age)
    llm_settings.reply_tool_calls(("call_canteen", {"message": "二食堂午饭吃什么"}), text="我帮你查一下二食堂的午餐。")
    llm_settings.queue(Reply(
        text="二食堂今天午餐有 **4 道菜**，最实惠的是凉拌黄瓜（3 元）。按价格排序可以这样算：\n\n"
             "```python\ndishes = {\"凉拌黄瓜\": 3, \"番茄炒蛋\": 6, \"红烧肉\": 12}\n"
             "print(sorted(dishes, key=dishes.get))\n```",
    ))
    page = sized(chat, DESKTOP)
    page.emulate_media(color_scheme="light")
    page.reload()  # the list with the conversations above
    chat.chat_ready()
    ask(page, "二食堂中午吃什么？")
    wait_answered(page)
    page.click(f"{LAST_ANSWER} .tool summary")
    page.wait_for_timeout(400)  # the chart's short entry animation
    shots = {"light": chat.screenshot("page-light")}
    page.click("#theme-toggle")
    page.wait_for_timeout(100)
    shots["dark"] = chat.screenshot("page-dark")
    page.click("#theme-toggle")  # the phone picture in light
    page.set_viewport_size(PHONE)
    page.wait_for_timeout(400)  # the chart redraws for the narrow width
    shots["phone"] = chat.screenshot("page-phone")
    assert no_sideways_scroll(page)
    if cjk_font_installed():  # without one the pictures show boxes instead of Chinese: keep the committed ones
        for name, path in shots.items():
            shutil.copyfile(path, settings.BASE_DIR / "docs" / f"screenshot-{name}.png")
