"""The page never shows a blocked word of the answer, not even for a moment while it streams
split over chunks: the reply ends with the notice, marked cut, and reloads the same
(docs/safety.md#the-answer-while-it-streams). In Chromium, against the scripted model."""

import pytest

from chat_app.tests.gateways.page.test_page_chat import PANE_SNAPSHOT, _ask, _wait_answered
from safety_app.models import ListWord, WordList
from testkit.model.fake_llm import Reply

pytestmark = pytest.mark.django_db(transaction=True)

BLOCKED = "甲乙丙丁戊己庚辛壬癸"
NOTICE = "（回答中出现了不适合展示的内容，已停止生成。请换个问法。）"

# Every text the pane ever held, recorded by a MutationObserver from before the question.
WATCH = """() => {
    window.__seen = [];
    const pane = document.getElementById('messages');
    new MutationObserver(() => window.__seen.push(pane.textContent))
        .observe(pane, {subtree: true, childList: true, characterData: true});
}"""


def test_a_blocked_word_never_appears_on_the_page(browser_page, user, agent, llm_settings):
    politics = WordList.objects.create(name="涉政", category="涉政", action="block")
    ListWord.objects.create(word_list=politics, word=BLOCKED)
    llm_settings.queue(Reply(text="食堂今天开到九点。" + BLOCKED + "后面的话。", chunk_size=1, chunk_delay=0.02))
    browser_page.sign_in(user)
    page = browser_page.page
    page.evaluate(WATCH)

    _ask(page, "食堂开到几点")
    _wait_answered(page)

    seen = page.evaluate("() => window.__seen")
    assert len(seen) > 5  # it watched the answer arrive piece by piece
    assert not [text for text in seen if BLOCKED[:1] in text or "后面" in text]
    live = page.evaluate(PANE_SNAPSHOT)
    assert live[1]["text"][-1].endswith(NOTICE) and live[1]["text"][-1].startswith("食堂今天开到九点。")
    page.reload()
    browser_page.chat_ready()
    assert page.evaluate(PANE_SNAPSHOT) == live
    assert BLOCKED[:1] not in page.text_content("#messages")
