"""The server-rendered page views (Django test client): access rules and the first state."""
import json
import re

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from agents_app.models import Agent
from chat_app.models import Conversation, Message, Run
from chat_app.runs.admission import turn_begin
from chat_app.runs.chat_input import ChatInput

pytestmark = pytest.mark.django_db


def _page_state(response) -> dict:
    html = response.content.decode()
    found = re.search(r'<script id="page-state" type="application/json">(.*?)</script>', html, re.DOTALL)
    assert found, "the page embeds its state for chat.js"
    return json.loads(found.group(1))


@pytest.fixture
def agents(db):
    default = Agent.objects.create(slug="xiaozhi", name="校园小智", is_default=True)
    other = Agent.objects.create(slug="course", name="选课助手")
    Agent.objects.create(slug="off", name="停用的智能体", enabled=False)
    return default, other


def test_chat_page_requires_login(client):
    response = client.get("/")
    assert response.status_code == 302
    assert response.url.startswith(reverse("login"))


def test_login_page_logs_in_and_redirects_to_chat(client, user, password):
    page = client.get(reverse("login"))
    assert page.status_code == 200
    assert "校园小智" in page.content.decode() and "学号" in page.content.decode()
    response = client.post(reverse("login"), {"username": user.username, "password": password})
    assert response.status_code == 302 and response.url == "/"


def test_login_page_shows_a_chinese_error_for_a_wrong_password(client, user):
    response = client.post(reverse("login"), {"username": user.username, "password": "wrong"})
    assert response.status_code == 200
    assert "学号或密码不正确" in response.content.decode()


def test_logout_is_a_post_and_ends_the_session(student_client):
    assert student_client.get("/").status_code == 200
    response = student_client.post(reverse("logout"))
    assert response.status_code == 302 and response.url == reverse("login")
    assert student_client.get("/").status_code == 302


def test_sidebar_lists_own_conversations_newest_first(student_client, user, agents):
    older = Conversation.objects.create(user=user, agent=agents[0], title="较早的对话")
    newer = Conversation.objects.create(user=user, agent=agents[0], title="最新的对话")
    stranger = get_user_model().objects.create_user(username="20239999", password="x")
    Conversation.objects.create(user=stranger, title="别人的对话")
    Conversation.objects.filter(pk=older.pk).update(updated_at=newer.updated_at.replace(year=2020))

    html = student_client.get("/").content.decode()

    assert "别人的对话" not in html
    assert html.index("最新的对话") < html.index("较早的对话")


def test_agent_picker_offers_enabled_agents_with_the_default_selected(student_client, agents):
    response = student_client.get("/")
    html = response.content.decode()
    assert '<option value="xiaozhi" selected>校园小智</option>' in html
    assert '<option value="course">选课助手</option>' in html
    assert "停用的智能体" not in html
    assert _page_state(response)["agent"] == "xiaozhi"


def test_conversation_page_embeds_its_stored_messages_in_order(student_client, user, agents):
    conversation = Conversation.objects.create(user=user, agent=agents[1], title="选课")
    rows = [
        ("user", "有什么选修课", {}),
        ("assistant", "", {"tool_calls": [{"id": "c1", "type": "function", "function": {"name": "call_course"}}]}),
        ("tool", "<script>window.__xss=1</script>三门课", {"tool_call_id": "c1", "tool": "call_course", "ok": True}),
        ("assistant", "有三门。", {"interrupted": True}),
    ]
    for seq, (role, content, meta) in enumerate(rows):
        Message.objects.create(conversation=conversation, role=role, content=content, meta=meta, seq=seq)

    response = student_client.get(reverse("chat-conversation", args=[conversation.id]))

    state = _page_state(response)
    assert state["conversation_id"] == str(conversation.id)
    assert state["agent"] == "course"  # the conversation's own agent, not the default
    assert [(m["role"], m["content"], m["meta"]) for m in state["messages"]] == rows
    # json_script escapes "<" so stored text cannot close the script element.
    assert "<script>window.__xss" not in response.content.decode()


def test_a_conversation_a_client_opened_shows_its_opening_while_its_first_run_is_running(student_client, user,
                                                                                         agents):
    opening = (("user", "我叫张三"), ("assistant", "你好张三！"))
    start = turn_begin(user=user, chat=ChatInput(message="我叫什么？", conversation_id=None, agent="xiaozhi",
                                                 hint_domain=None, opening=opening),
                       request_id="req-opening-1", slot_key="test-slot")
    assert start.run.status == Run.Status.RUNNING
    assert start.history == [{"role": "user", "content": "我叫张三"}, {"role": "assistant", "content": "你好张三！"},
                             {"role": "user", "content": "我叫什么？"}]

    state = _page_state(student_client.get(reverse("chat-conversation", args=[start.run.conversation_id])))
    assert [(m["role"], m["content"], m["meta"].get("from_client")) for m in state["messages"]] == [
        ("user", "我叫张三", True), ("assistant", "你好张三！", True), ("user", "我叫什么？", None)]


def test_another_users_conversation_is_a_404(student_client, agents):
    stranger = get_user_model().objects.create_user(username="20239999", password="x")
    theirs = Conversation.objects.create(user=stranger, title="别人的对话")
    response = student_client.get(reverse("chat-conversation", args=[theirs.id]))
    assert response.status_code == 404
    assert "别人的对话" not in response.content.decode()


def test_a_page_that_is_not_there_is_the_sites_page_in_the_readers_language(student_client, client, agents):
    """Issue 42: a stale or foreign conversation link showed Django's bare English "Not Found"."""
    stale = reverse("chat-conversation", args=["00000000-0000-4000-8000-000000000000"])
    for reader, path in ((student_client, stale), (client, "/no-such-page/")):
        page = reader.get(path)
        html = page.content.decode()
        assert page.status_code == 404 and page["Content-Type"].startswith("text/html")
        assert '<html lang="zh-CN">' in html and "<title>找不到页面 · 校园小智</title>" in html
        assert '<h1 id="not-found-title">找不到这个页面</h1>' in html and 'href="/static/css/app.css"' in html
        assert '<a class="btn btn-primary" id="not-found-back" href="/">回到聊天页</a>' in html
    english = student_client.get(stale, HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert '<html lang="en">' in english and '<h1 id="not-found-title">Page not found</h1>' in english
    assert "Back to the chat" in english
    # The API answers its own JSON, never this page.
    api = student_client.get("/api/v1/conversations/00000000-0000-4000-8000-000000000000")
    assert api.status_code == 404 and api.json()["code"] == 40401


def test_favicon_ico_is_the_sites_icon(client):
    """Issue 42: /favicon.ico, which clients ask for whatever a page links, was a 404 in the log."""
    from django.contrib.staticfiles import finders

    for method in (client.get, client.head):
        icon = method("/favicon.ico")
        assert (icon.status_code, icon["Location"]) == (301, "/static/img/logo.svg")
    assert finders.find("img/logo.svg")


def test_page_references_only_local_scripts(student_client):
    html = student_client.get("/").content.decode()
    sources = re.findall(r'<script[^>]+src="([^"]+)"', html)
    assert sources, "the page loads its scripts"
    # No CDN (campus networks are offline): static files, and the page's own translation catalog.
    assert all(src.startswith("/static/") or src == "/jsi18n/" for src in sources), sources
    assert "/jsi18n/" in sources and sources.index("/jsi18n/") < next(i for i, s in enumerate(sources) if "chat.js" in s)
