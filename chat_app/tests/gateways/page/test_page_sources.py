"""An answer that read knowledge passages shows them as footnotes, each opening its document at
its page, live and after a reload (docs/knowledge.md). In Chromium, against the scripted model
and the demo handbook's real PDF, indexed."""

from pathlib import Path

import pytest

from chat_app.tests.gateways.page.test_page_chat import _ask, _wait_answered
from knowledge_app.indexing import documents_index_waiting
from knowledge_app.ingest import document_add
from knowledge_app.models import KnowledgeCollection

pytestmark = pytest.mark.django_db(transaction=True)

HANDBOOK = Path(__file__).resolve().parents[4] / "demo_app" / "knowledge"
FOOTNOTES = """() => [...document.querySelectorAll('#messages .msg-assistant .sources .source')].map((li) => ({
    text: li.textContent, href: li.querySelector('a') ? li.querySelector('a').getAttribute('href') : null}))"""


def test_the_passages_an_answer_read_are_its_footnotes(browser_page, user, agent, llm_settings, settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path
    handbook = KnowledgeCollection.objects.create(slug="handbook", name="学生手册", description="转专业、学籍规定")
    document_add(collection=handbook, name="transfer-major.pdf", data=(HANDBOOK / "transfer-major.pdf").read_bytes())
    documents_index_waiting()
    agent.knowledge_collections.add(handbook)
    llm_settings.reply_tool_calls(("search_handbook", {"query": "转专业需要满足什么条件"}))
    llm_settings.reply_text("需要满足第四条的六项条件 [1]。")
    browser_page.sign_in(user)
    page = browser_page.page

    _ask(page, "转专业需要满足什么条件？")
    _wait_answered(page)

    live = page.evaluate(FOOTNOTES)
    assert live and live[0]["text"].startswith("[1] 《转专业管理规定（示例）》 p.2 · 第二章")
    assert live[0]["href"].endswith("/file#page=2")
    origin = page.evaluate("location.origin")
    opened = page.request.get(origin + live[0]["href"].split("#")[0])  # the page's session opens it
    assert opened.status == 200 and opened.headers["content-type"] == "application/pdf"
    page.reload()
    browser_page.chat_ready()
    assert page.evaluate(FOOTNOTES) == live
