"""REST endpoints through the real ASGI app: agents, own conversations (IDOR → 404), messages, schema."""
import uuid
from datetime import timedelta

import httpx
import pytest
from django.utils import timezone

from agents_app.models import Agent
from campus_agent.base.errors import MSG_NO_SUCH_RESOURCE
from chat_app.models import Conversation, Message

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.embedded]


@pytest.fixture
def api(live_asgi, auth_headers):
    with httpx.Client(base_url=live_asgi, headers=auth_headers, timeout=10) as client:
        yield client


def _conversation(user, title: str, *, minutes_ago: int = 0) -> Conversation:
    conversation = Conversation.objects.create(user=user, title=title)
    Conversation.objects.filter(id=conversation.id).update(updated_at=timezone.now() - timedelta(minutes=minutes_ago))
    return conversation


def test_agents_lists_enabled_agents_default_first(api):
    Agent.objects.create(slug="a-helper", name="助手甲")
    Agent.objects.create(slug="xiaozhi", name="校园小智", is_default=True)
    Agent.objects.create(slug="off", name="停用的", enabled=False)
    response = api.get("/api/v1/agents")
    assert response.status_code == 200
    assert response.json() == [
        {"slug": "xiaozhi", "name": "校园小智", "is_default": True},
        {"slug": "a-helper", "name": "助手甲", "is_default": False},
    ]


def test_conversations_are_own_newest_first_and_paginated(api, user, other_user):
    for i in range(23):
        _conversation(user, f"对话{i}", minutes_ago=i)
    _conversation(other_user, "别人的对话")
    first = api.get("/api/v1/conversations").json()
    assert first["count"] == 23
    assert [c["title"] for c in first["results"]] == [f"对话{i}" for i in range(20)]
    assert first["next"]
    second = api.get("/api/v1/conversations", params={"page": 2}).json()
    assert [c["title"] for c in second["results"]] == ["对话20", "对话21", "对话22"]
    small = api.get("/api/v1/conversations", params={"page_size": 5}).json()
    assert len(small["results"]) == 5


def test_conversation_detail_messages_and_delete(api, user):
    conversation = _conversation(user, "食堂")
    Message.objects.create(conversation=conversation, role="user", content="今天吃啥", request_id="0123456789abcdef")
    Message.objects.create(conversation=conversation, role="assistant", content="红烧肉", seq=1, meta={"usage": {"total_tokens": 3}})
    detail = api.get(f"/api/v1/conversations/{conversation.id}")
    assert detail.status_code == 200
    assert detail.json()["title"] == "食堂"
    messages = api.get(f"/api/v1/conversations/{conversation.id}/messages").json()
    assert [(m["role"], m["content"]) for m in messages["results"]] == [("user", "今天吃啥"), ("assistant", "红烧肉")]
    assert messages["results"][0]["request_id"] == "0123456789abcdef"
    deleted = api.delete(f"/api/v1/conversations/{conversation.id}")
    assert deleted.status_code == 204
    assert not Conversation.objects.filter(id=conversation.id).exists()
    assert not Message.objects.filter(conversation_id=conversation.id).exists()
    assert api.get(f"/api/v1/conversations/{conversation.id}").status_code == 404


def test_another_users_conversation_is_404_everywhere(api, other_user):
    theirs = _conversation(other_user, "别人的秘密")
    Message.objects.create(conversation=theirs, role="user", content="秘密内容")
    missing = uuid.uuid4()
    for target in (theirs.id, missing):
        for method, path in (
            ("GET", f"/api/v1/conversations/{target}"),
            ("DELETE", f"/api/v1/conversations/{target}"),
            ("GET", f"/api/v1/conversations/{target}/messages"),
        ):
            response = api.request(method, path)
            assert response.status_code == 404, (method, path)
            assert response.json() == {"code": 40401, "message": "对话不存在。"}
    assert Conversation.objects.filter(id=theirs.id).exists()


def test_unknown_api_paths_answer_json_404(api):
    for path in ("/api/v1/conversations/not-a-uuid", "/api/v1/nothing-here"):
        response = api.get(path)
        assert response.status_code == 404, path
        assert response.json() == {"code": 40401, "message": MSG_NO_SUCH_RESOURCE}
    page = api.get("/no-such-page")
    assert page.status_code == 404 and page.headers["Content-Type"].startswith("text/html")


def test_every_api_answer_carries_the_request_id(api):
    response = api.get("/api/v1/agents", headers={"X-Request-Id": "00112233445566ff"})
    assert response.headers["X-Request-Id"] == "00112233445566ff"
    generated = api.get("/api/v1/agents", headers={"X-Request-Id": "not hex; injected"})
    assert len(generated.headers["X-Request-Id"]) == 16 and generated.headers["X-Request-Id"] != "not hex; injected"


def test_openapi_schema_documents_the_stream_and_its_frames(live_asgi, db):
    schema = httpx.get(f"{live_asgi}/api/v1/schema", params={"format": "json"}, timeout=20)
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    for path in ("/api/v1/chat", "/api/v1/auth/token", "/api/v1/auth/sso", "/api/v1/auth/logout", "/api/v1/agents",
                 "/api/v1/conversations", "/api/v1/conversations/{conversation_id}",
                 "/api/v1/conversations/{conversation_id}/messages", "/api/v1/runs/{run_id}/events",
                 "/api/v1/runs/{run_id}/stop", "/api/v1/runs/{run_id}/approvals"):
        assert path in paths, path
    stream = paths["/api/v1/chat"]["post"]["responses"]["200"]["content"]["text/event-stream"]["schema"]
    titles = {frame["title"] for frame in stream["oneOf"]}
    assert titles == {"session", "chunk", "reasoning", "tool_call", "tool_chunk", "tool_result", "approval_required",
                      "authorization_required", "elicitation_required", "moderation", "error", "done"}
    approvals = paths["/api/v1/runs/{run_id}/approvals"]["post"]
    assert set(approvals["responses"]) >= {"200", "400", "404", "409"}
    assert "jwtAuth" in schema.json()["components"]["securitySchemes"]
    docs = httpx.get(f"{live_asgi}/api/v1/docs", timeout=10)
    assert docs.status_code == 200 and "swagger" in docs.text.lower()


# --- search, rename (issue 13) ----------------------------------------------------------------


def test_search_finds_titles_and_message_text_of_own_conversations_only(api, user, other_user):
    by_title = _conversation(user, "图书馆开放时间", minutes_ago=1)
    by_text = _conversation(user, "现在几点", minutes_ago=2)
    Message.objects.create(conversation=by_text, role="user", content="现在几点")
    Message.objects.create(conversation=by_text, role="assistant", content="周末图书馆开到 22:00", seq=1)
    by_tool_only = _conversation(user, "别的", minutes_ago=3)
    Message.objects.create(conversation=by_tool_only, role="tool", content="图书馆数据")  # tool output is not text said
    unrelated = _conversation(user, "食堂", minutes_ago=4)
    theirs = _conversation(other_user, "图书馆（别人的）")
    Message.objects.create(conversation=theirs, role="user", content="图书馆")

    found = api.get("/api/v1/conversations", params={"q": "图书馆"}).json()
    assert [c["id"] for c in found["results"]] == [str(by_title.id), str(by_text.id)]
    assert found["count"] == 2
    # Case is ignored, and an empty query lists everything.
    Message.objects.create(conversation=unrelated, role="user", content="Menu please")
    assert [c["title"] for c in api.get("/api/v1/conversations", params={"q": "MENU"}).json()["results"]] == ["食堂"]
    assert api.get("/api/v1/conversations", params={"q": "  "}).json()["count"] == 4
    assert str(theirs.id) not in api.get("/api/v1/conversations", params={"q": "别人"}).text


def test_a_search_hit_says_why_it_was_found(api, user):
    """Issue 42: a conversation found by its answers' text showed only its title; each hit
    carries the text around the first match (whitespace folded, "…" where cut)."""
    by_answer = _conversation(user, "现在几点", minutes_ago=1)
    Message.objects.create(conversation=by_answer, role="user", content="周末开到几点")
    answer = "各馆开放时间如下：\n\n| 馆 | 周末 |\n|---|---|\n| 总馆 | 9:00–21:00 |\n" + "东区分馆周末闭馆整理。" * 10
    Message.objects.create(conversation=by_answer, role="assistant", content=answer, seq=1)
    short = _conversation(user, "英语", minutes_ago=2)
    Message.objects.create(conversation=short, role="user", content="Library hours?")
    by_title = _conversation(user, "总馆在哪", minutes_ago=3)

    found = {c["id"]: c["snippet"] for c in api.get("/api/v1/conversations", params={"q": "总馆"}).json()["results"]}
    around = "… | 周末 | |---|---| | 总馆 | 9:00–21:00 | 东区分馆周末闭馆整理。东区分馆周末闭馆整理。东区分馆周末闭馆整理。东…"
    assert found == {str(by_answer.id): around, str(by_title.id): None}
    # Case ignored as the search ignores it; a whole short message is not cut.
    assert api.get("/api/v1/conversations", params={"q": "LIBRARY"}).json()["results"][0]["snippet"] == "Library hours?"
    assert api.get("/api/v1/conversations").json()["results"][0]["snippet"] is None  # not a search
    # Markup in a message is text in the JSON: the page puts it in text nodes (test_page_sidebar).
    Message.objects.create(conversation=short, role="assistant", content="<b onmouseover=x>图书馆</b>", seq=1)
    assert api.get("/api/v1/conversations", params={"q": "图书馆"}).json()["results"][0]["snippet"] == (
        "<b onmouseover=x>图书馆</b>")


def test_search_treats_like_wildcards_and_odd_text_as_plain_text(api, user):
    percent = _conversation(user, "优惠 50% 的窗口")
    underscore = _conversation(user, "snake_case 命名")
    _conversation(user, "500 元")
    _conversation(user, "snakeXcase")
    assert [c["id"] for c in api.get("/api/v1/conversations", params={"q": "%"}).json()["results"]] == [str(percent.id)]
    assert [c["id"] for c in api.get("/api/v1/conversations", params={"q": "e_c"}).json()["results"]] == [
        str(underscore.id)
    ]
    assert api.get("/api/v1/conversations", params={"q": "\\"}).json()["count"] == 0
    nul = api.get("/api/v1/conversations", params={"q": "a\x00b"})  # refused, no 500 (issue 20: it matched all)
    assert nul.status_code == 400 and nul.json()["code"] == 40001
    too_long = api.get("/api/v1/conversations", params={"q": "长" * 101})
    assert too_long.status_code == 400
    assert too_long.json() == {"code": 40001, "message": "q 不能超过 100 个字符。"}
    assert api.get("/api/v1/conversations", params={"q": "长" * 100}).status_code == 200


def test_rename_validates_and_cleans_the_title(api, user, other_user):
    conversation = _conversation(user, "现在几点", minutes_ago=30)
    before = Conversation.objects.get(id=conversation.id).updated_at
    url = f"/api/v1/conversations/{conversation.id}"

    renamed = api.patch(url, json={"title": "  周三\n的 课表\x00  "})
    assert renamed.status_code == 200
    assert renamed.json()["title"] == "周三 的 课表"
    stored = Conversation.objects.get(id=conversation.id)
    assert stored.title == "周三 的 课表" and stored.updated_at == before  # renaming is not activity

    for body, message in (
        ({"title": "   "}, "title: 标题不能为空。"),
        ({"title": "长" * 65}, "title: 标题不能超过 64 个字符。"),
        ({}, "title: 该字段是必填项。"),
        ({"title": 5}, None),
        ({"title": ["x"]}, None),
    ):
        refused = api.patch(url, json=body)
        assert refused.status_code == 400, body
        assert refused.json()["code"] == 40001
        if message:
            assert refused.json()["message"] == message
    assert api.patch(url, json={"title": "长" * 64}).json()["title"] == "长" * 64
    assert api.put(url, json={"title": "整体替换"}).status_code == 405
    theirs = _conversation(other_user, "别人的")
    assert api.patch(f"/api/v1/conversations/{theirs.id}", json={"title": "改掉"}).status_code == 404
    assert Conversation.objects.get(id=theirs.id).title == "别人的"


def test_rename_through_the_session_needs_the_csrf_token(live_asgi, user, password):
    conversation = _conversation(user, "旧标题")
    with httpx.Client(base_url=live_asgi, timeout=10) as browser:
        login = browser.get("/login/")
        csrf = browser.cookies["csrftoken"]
        browser.post("/login/", data={"username": user.username, "password": password, "csrfmiddlewaretoken": csrf})
        url = f"/api/v1/conversations/{conversation.id}"
        assert login.status_code == 200
        assert browser.patch(url, json={"title": "新标题"}).status_code == 403
        ok = browser.patch(url, json={"title": "新标题"}, headers={"X-CSRFToken": browser.cookies["csrftoken"]})
        assert ok.status_code == 200
    assert Conversation.objects.get(id=conversation.id).title == "新标题"


# --- regenerate / edit: the last turn set aside (issue 13) -------------------------------------


def _turn(conversation, question: str, answer: str, *, at: int) -> list[Message]:
    when = timezone.now() - timedelta(minutes=60 - at)
    rows = [
        Message.objects.create(conversation=conversation, role="user", content=question),
        Message.objects.create(conversation=conversation, role="assistant", content="", seq=1,
                               meta={"tool_calls": [{"id": "c1", "type": "function",
                                                     "function": {"name": "call_canteen", "arguments": "{}"}}]}),
        Message.objects.create(conversation=conversation, role="tool", content="工具结果", seq=2,
                               meta={"tool_call_id": "c1", "tool": "call_canteen", "ok": True}),
        Message.objects.create(conversation=conversation, role="assistant", content=answer, seq=3),
    ]
    Message.objects.filter(id=rows[0].id).update(created_at=when)
    Message.objects.filter(id__in=[r.id for r in rows[1:]]).update(created_at=when + timedelta(seconds=5))
    return rows


def test_supersede_sets_the_last_turn_aside_and_the_model_no_longer_sees_it(api, user):
    from chat_app.conversations.history import history_build

    conversation = _conversation(user, "食堂")
    first = _turn(conversation, "一食堂吃什么", "红烧肉", at=1)
    last = _turn(conversation, "二食堂呢", "番茄炒蛋", at=2)

    answer = api.post(f"/api/v1/conversations/{conversation.id}/last-turn/supersede")
    assert answer.status_code == 200
    assert answer.json() == {"question": "二食堂呢", "message_id": str(last[0].id)}
    assert set(Message.objects.filter(superseded=True).values_list("id", flat=True)) == {r.id for r in last}
    assert [m["content"] for m in history_build(conversation=conversation, limit=20)] == [
        "一食堂吃什么", None, "工具结果", "红烧肉"
    ]
    # The rows are kept and listed with their flag, in order.
    listed = api.get(f"/api/v1/conversations/{conversation.id}/messages").json()["results"]
    assert [(m["content"], m["superseded"]) for m in listed if m["role"] == "user"] == [
        ("一食堂吃什么", False), ("二食堂呢", True)
    ]
    # Again: the turn before it is now the last live one.
    again = api.post(f"/api/v1/conversations/{conversation.id}/last-turn/supersede")
    assert again.json()["message_id"] == str(first[0].id)
    nothing = api.post(f"/api/v1/conversations/{conversation.id}/last-turn/supersede")
    assert nothing.status_code == 409 and nothing.json() == {"code": 40902, "message": "这个对话还没有可以重新生成的问题。"}


def test_supersede_refuses_while_an_answer_is_written_and_for_others(api, user, other_user):
    from chat_app.models import Run

    conversation = _conversation(user, "食堂")
    _turn(conversation, "一食堂吃什么", "红烧肉", at=1)
    run = Run.objects.create(conversation=conversation, user=user, heartbeat_at=timezone.now())
    busy = api.post(f"/api/v1/conversations/{conversation.id}/last-turn/supersede")
    assert busy.status_code == 409 and busy.json()["code"] == 40901
    assert not Message.objects.filter(superseded=True).exists()
    Run.objects.filter(id=run.id).update(status=Run.Status.FINISHED)
    theirs = _conversation(other_user, "别人的")
    _turn(theirs, "秘密", "答案", at=1)
    assert api.post(f"/api/v1/conversations/{theirs.id}/last-turn/supersede").status_code == 404
    assert not Message.objects.filter(superseded=True).exists()


# --- answer feedback (issue 13) ----------------------------------------------------------------


def test_feedback_is_stored_replaced_read_and_cleared(api, user):
    from chat_app.models import Feedback

    conversation = _conversation(user, "食堂")
    answer = _turn(conversation, "一食堂吃什么", "红烧肉", at=1)[-1]
    url = f"/api/v1/messages/{answer.id}/feedback"
    assert api.get(url).status_code == 404

    up = api.put(url, json={"rating": "up"})
    assert up.status_code == 200 and up.json()["rating"] == "up" and up.json()["comment"] == ""
    down = api.put(url, json={"rating": "down", "comment": " 价格不对\x00 "})
    assert down.json()["rating"] == "down"
    row = Feedback.objects.get()
    assert (row.rating, row.comment, row.user_id, row.message_id) == ("down", "价格不对", user.id, answer.id)
    assert api.get(url).json()["comment"] == "价格不对"

    for body in ({"rating": "meh"}, {}, {"rating": "up", "comment": "长" * 1001}, {"rating": "up", "comment": 3}):
        refused = api.put(url, json=body)
        assert refused.status_code == 400 and refused.json()["code"] == 40001, body
    assert api.put(url, json={"rating": "sideways"}).json()["message"] == "rating: rating 只能是 up 或 down。"
    assert Feedback.objects.get().rating == "down"

    assert api.delete(url).status_code == 204
    assert not Feedback.objects.exists()


def test_feedback_only_on_own_answers(api, user, other_user):
    from chat_app.models import Feedback

    mine = _conversation(user, "我的")
    question = _turn(mine, "问题", "回答", at=1)[0]
    theirs = _conversation(other_user, "别人的")
    their_answer = _turn(theirs, "问题", "回答", at=1)[-1]
    for target in (question.id, their_answer.id, uuid.uuid4()):
        refused = api.put(f"/api/v1/messages/{target}/feedback", json={"rating": "up"})
        assert refused.status_code == 404 and refused.json() == {"code": 40401, "message": "回答不存在。"}
    assert not Feedback.objects.exists()
