"""The 「我的数据」 dialog (issue 25 point 4) in headless Chromium: the download is the caller's
JSON export; deleting all conversations empties the list."""
import json

import pytest

from chat_app.models import Conversation, Message
from testkit.web.page_helpers import VIEWPORT_IDS, VIEWPORTS, no_sideways_scroll, sidebar_open, sized

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def chat(browser_page, user, password, agent, llm_settings):
    conversation = Conversation.objects.create(user=user, title="食堂的对话")
    Message.objects.create(conversation=conversation, role="user", content="吃什么", seq=1)
    Message.objects.create(conversation=conversation, role="assistant", content="红烧肉", seq=2,
                           meta={"provider": "default", "model": "qwen-plus"})
    browser_page.sign_in(user)
    return browser_page


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=VIEWPORT_IDS)
def test_download_and_delete_everything(chat, user, viewport):
    page = sized(chat, viewport)
    sidebar_open(page)
    assert no_sideways_scroll(page)
    page.click("#my-data-open")
    page.wait_for_selector("#my-data[open]")
    link = page.evaluate("() => { const a = document.getElementById('my-data-download'); return [a.href, a.hasAttribute('download')]; }")
    assert link[0].endswith("/api/v1/me/export") and link[1]
    # What the link downloads, fetched as the page would (its session): the browser wrapper
    # of these tests cannot hold Playwright's download context open.
    data = json.loads(page.evaluate("async () => (await fetch('/api/v1/me/export')).text()"))
    assert data["user"]["username"] == user.username
    assert [c["title"] for c in data["conversations"]] == ["食堂的对话"]
    # Each AI answer in it is labelled, as the dialog says (docs/safety.md, "Labels").
    answer = data["conversations"][0]["messages"][1]
    assert answer["label"] == "内容由 AI 生成" and answer["aigc"]["ProduceID"] == answer["id"]
    assert (answer["aigc"]["provider"], answer["aigc"]["model"]) == ("default", "qwen-plus")
    assert "内容由 AI 生成" in page.text_content("#my-data-labels") and page.is_visible("#my-data-labels")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#my-data-delete")
    page.wait_for_function("() => document.getElementById('my-data-status').textContent === '已删除 1 个对话。'")
    assert not Conversation.objects.filter(user=user).exists()
    # Closing reloads the page at "/": wait for the new document (the URL may be "/" already, so
    # waiting for the URL alone can pass before the reload and race it).
    page.evaluate("document.documentElement.dataset.before = 'close'")
    page.click("#my-data-close")
    page.wait_for_selector("html:not([data-before])")
    page.wait_for_url("**/")
    chat.chat_ready()
    sidebar_open(page)
    assert page.query_selector_all(".conversation-item") == []
