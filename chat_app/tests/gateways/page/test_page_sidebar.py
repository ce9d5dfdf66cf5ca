"""The conversation list in Chromium at desktop and phone sizes (issue 13): date groups, inline
rename, search over titles and message text."""
from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from chat_app.models import Conversation, Message
from testkit.web.page_helpers import VIEWPORT_IDS, VIEWPORTS, no_sideways_scroll, sidebar_open, sized

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

GROUPS_AND_TITLES = """() => [...document.querySelectorAll('#conversation-list > li')].map((li) =>
    li.classList.contains('conversation-group') ? '# ' + li.textContent : li.querySelector('a').textContent)"""


@pytest.fixture
def chat(browser_page, user, password, agent):
    browser_page.sign_in(user)
    return browser_page


def _conversation(user, agent, title: str, updated) -> Conversation:
    conversation = Conversation.objects.create(user=user, agent=agent, title=title)
    Conversation.objects.filter(id=conversation.id).update(updated_at=updated)
    return conversation


def _local_midnight() -> datetime:
    # Chromium runs on this machine, in its time zone: "today" is the local calendar day.
    now = datetime.now().astimezone()
    return now.replace(hour=0, minute=0, second=0, microsecond=0)


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=VIEWPORT_IDS)
def test_conversations_are_grouped_by_date(chat, user, agent, viewport):
    midnight = _local_midnight()
    _conversation(user, agent, "上个月的对话", midnight - timedelta(days=30))
    _conversation(user, agent, "三天前的对话", midnight - timedelta(days=3) + timedelta(hours=10))
    _conversation(user, agent, "昨天的对话", midnight - timedelta(hours=12))
    _conversation(user, agent, "今天的对话", timezone.now() - timedelta(seconds=1))
    page = sized(chat, viewport)
    page.reload()
    chat.chat_ready()
    sidebar_open(page)

    assert page.evaluate(GROUPS_AND_TITLES) == [
        "# 今天", "今天的对话", "# 昨天", "昨天的对话", "# 7 天内", "三天前的对话", "# 更早", "上个月的对话",
    ]
    assert no_sideways_scroll(page)


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=VIEWPORT_IDS)
def test_rename_inline_saves_and_escape_cancels(chat, user, agent, viewport):
    other = _conversation(user, agent, "现在几点", timezone.now() - timedelta(minutes=5))
    opened = _conversation(user, agent, "现在几点", timezone.now())
    page = sized(chat, viewport)
    page.goto(f"{chat.base_url}/c/{opened.id}/")
    chat.chat_ready()
    sidebar_open(page)

    item = f"li[data-id='{opened.id}']"
    page.click(f"{item} .rename-conversation")
    page.fill(f"{item} .rename-input", "  周三的课表  ")
    page.press(f"{item} .rename-input", "Enter")
    page.wait_for_function(
        "(id) => document.querySelector(`li[data-id='${id}'] a`).textContent === '周三的课表'", arg=str(opened.id)
    )
    assert page.is_hidden(f"{item} .rename-input")
    assert page.text_content("#chat-title") == "周三的课表"  # the open conversation's heading too
    assert page.get_attribute(f"{item} .delete-conversation", "aria-label") == "删除对话：周三的课表"
    assert Conversation.objects.get(id=opened.id).title == "周三的课表"

    # Escape leaves the title as it was; nothing is sent.
    other_item = f"li[data-id='{other.id}']"
    page.click(f"{other_item} .rename-conversation")
    page.fill(f"{other_item} .rename-input", "不要保存")
    page.press(f"{other_item} .rename-input", "Escape")
    assert page.text_content(f"{other_item} a") == "现在几点"
    assert page.evaluate("document.getElementById('app').classList.contains('sidebar-open')") == (viewport["width"] < 800)

    # An empty title is refused with a reason.
    page.click(f"{other_item} .rename-conversation")
    page.fill(f"{other_item} .rename-input", "   ")
    page.press(f"{other_item} .rename-input", "Enter")
    page.wait_for_function("() => document.getElementById('status').textContent === '标题不能为空。'")
    assert Conversation.objects.get(id=other.id).title == "现在几点"

    page.reload()
    chat.chat_ready()
    sidebar_open(page)
    assert page.text_content(f"{item} a") == "周三的课表"


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=VIEWPORT_IDS)
def test_search_finds_titles_and_message_text(chat, user, other_user, agent, viewport):
    now = timezone.now()
    by_title = _conversation(user, agent, "图书馆开放时间", now - timedelta(minutes=1))
    by_text = _conversation(user, agent, "现在几点", now - timedelta(minutes=2))
    Message.objects.create(conversation=by_text, role="user", content="周末开到几点")
    Message.objects.create(conversation=by_text, role="assistant", content="周末图书馆开到晚上十点", seq=1)
    _conversation(user, agent, "食堂菜单", now - timedelta(minutes=3))
    theirs = _conversation(other_user, agent, "别人的图书馆", now)
    page = sized(chat, viewport)
    page.reload()
    chat.chat_ready()
    sidebar_open(page)

    page.fill("#conversation-search", "图书馆")
    page.wait_for_selector("#conversation-list[data-query='图书馆']", state="attached")
    shown = page.eval_on_selector_all("#conversation-list li.conversation-item", "els => els.map((e) => e.dataset.id)")
    assert shown == [str(by_title.id), str(by_text.id)] and str(theirs.id) not in shown
    assert page.is_hidden("#search-empty")

    page.fill("#conversation-search", "50%_x")
    page.wait_for_selector("#conversation-list[data-query='50%_x']", state="attached")
    assert page.is_visible("#search-empty") and page.text_content("#search-empty") == "没有找到相关对话。"

    page.fill("#conversation-search", "")
    page.wait_for_function("() => !('query' in document.getElementById('conversation-list').dataset)")
    assert len(page.query_selector_all("#conversation-list li.conversation-item")) == 3
    # A hit opens its conversation.
    page.fill("#conversation-search", "十点")
    page.wait_for_selector("#conversation-list[data-query='十点']", state="attached")
    page.click(f"li[data-id='{by_text.id}'] a")
    page.wait_for_url(f"**/c/{by_text.id}/")
    chat.chat_ready()
    assert "周末图书馆开到晚上十点" in page.text_content("#messages")


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=VIEWPORT_IDS)
def test_a_hit_in_the_text_shows_why_with_the_match_marked(chat, user, agent, viewport):
    """Issue 42: a conversation found by its answer's text showed only its title. The snippet is
    the API's text put in text nodes: markup in a message stays text (nothing runs, nothing loads)."""
    now = timezone.now()
    by_text = _conversation(user, agent, "现在几点", now - timedelta(minutes=1))
    Message.objects.create(conversation=by_text, role="user", content="周末开到几点")
    Message.objects.create(conversation=by_text, role="assistant", seq=1,
                           content="<img src=/x onerror=alert(1)>周末**总馆**开到晚上十点，东区分馆五点闭馆。")
    by_title = _conversation(user, agent, "总馆在哪", now - timedelta(minutes=2))
    page = sized(chat, viewport)
    page.reload()
    chat.chat_ready()
    sidebar_open(page)

    page.fill("#conversation-search", "总馆")
    page.wait_for_selector("#conversation-list[data-query='总馆']", state="attached")
    why = f"li[data-id='{by_text.id}'] .conversation-snippet"
    assert page.text_content(why) == "…nerror=alert(1)>周末**总馆**开到晚上十点，东区分馆五点闭馆。"
    assert page.eval_on_selector_all(f"{why} mark", "ms => ms.map((m) => m.textContent)") == ["总馆"]
    assert page.eval_on_selector_all(f"{why} *", "ns => ns.map((n) => n.tagName)") == ["MARK"]  # no <img>
    assert page.text_content(f"li[data-id='{by_text.id}'] a") == "现在几点"
    described = page.get_attribute(f"li[data-id='{by_text.id}'] a", "aria-describedby")
    assert described and page.get_attribute(why, "id") == described
    assert page.query_selector(f"li[data-id='{by_title.id}'] .conversation-snippet") is None  # its title says why
    assert no_sideways_scroll(page)
    chat.screenshot(f"search-snippet-{viewport['width']}")
