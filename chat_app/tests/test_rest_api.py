"""REST endpoints through the real ASGI app: agents, own conversations (IDOR → 404), messages, schema."""
import uuid
from datetime import timedelta

import httpx
import pytest
from django.utils import timezone

from agents_app.models import Agent
from chat_app.api_errors import MSG_NO_SUCH_RESOURCE
from chat_app.models import Conversation, Message

pytestmark = pytest.mark.django_db(transaction=True)


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
                 "/api/v1/conversations/{conversation_id}/messages"):
        assert path in paths, path
    stream = paths["/api/v1/chat"]["post"]["responses"]["200"]["content"]["text/event-stream"]["schema"]
    titles = {frame["title"] for frame in stream["oneOf"]}
    assert titles == {"session", "chunk", "tool_call", "tool_chunk", "tool_result", "error", "done"}
    assert "jwtAuth" in schema.json()["components"]["securitySchemes"]
    docs = httpx.get(f"{live_asgi}/api/v1/docs", timeout=10)
    assert docs.status_code == 200 and "swagger" in docs.text.lower()
