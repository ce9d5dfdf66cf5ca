"""Everything POST /api/v1/chat refuses before storing anything (JSON answers, DESIGN §4)."""
import json

import httpx
import pytest

from agents_app.models import Agent
from chat_app.models import Conversation, Message

pytestmark = pytest.mark.django_db(transaction=True)


def _post(base, headers, content: bytes | str, **kw):
    return httpx.post(f"{base}/api/v1/chat", content=content, headers={"Content-Type": "application/json", **headers},
                      timeout=10, **kw)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "请求体必须是 JSON 对象。"),
        (b"[1, 2]", "请求体必须是 JSON 对象。"),
        (b"\xff\xfe", "请求体必须是 JSON 对象。"),
        (json.dumps({}), "message 不能为空。"),
        (json.dumps({"message": " \n\t "}), "message 不能为空。"),
        (json.dumps({"message": 42}), "message 的类型不正确。"),
        (json.dumps({"message": "好" * 8001}), "message 不能超过 8000 个字符。"),
        (json.dumps({"message": "你好", "conversation_id": "abc"}), "conversation_id 不是有效的对话 ID。"),
        (json.dumps({"message": "你好", "conversation_id": 7}), "conversation_id 不是有效的对话 ID。"),
        (json.dumps({"message": "你好", "agent": ["x"]}), "agent 的类型不正确。"),
        (json.dumps({"message": "你好", "agent": "nobody"}), "智能体不存在或已停用。"),
        (json.dumps({"message": "你好", "agent": "off"}), "智能体不存在或已停用。"),
        # PostgreSQL cannot store U+0000: refused up front instead of a 500 (or a lost reply).
        (json.dumps({"message": "你好\u0000吗"}), "message 不能包含空字符（\\u0000）。"),
        (json.dumps({"message": "你好", "hint_domain": "a\u0000"}), "hint_domain 不能包含空字符（\\u0000）。"),
    ],
)
def test_invalid_bodies_answer_400_and_store_nothing(live_asgi, agent, auth_headers, body, message):
    Agent.objects.create(slug="off", name="停用的", enabled=False)
    response = _post(live_asgi, auth_headers, body)
    assert response.status_code == 400
    assert response.json() == {"code": 40001, "message": message}
    assert response.headers["X-Request-Id"]
    assert not Conversation.objects.exists() and not Message.objects.exists()


def test_message_of_8000_characters_after_trimming_is_accepted(live_asgi, llm_settings, agent, auth_headers):
    llm_settings.reply_text("收到")
    response = _post(live_asgi, auth_headers, json.dumps({"message": "  " + "好" * 8000 + "  "}))
    assert response.status_code == 200
    assert Message.objects.get(role="user").content == "好" * 8000


def test_body_over_64_kb_is_refused(live_asgi, agent, auth_headers):
    body = json.dumps({"message": "你好", "padding": "x" * (64 * 1024)})
    response = _post(live_asgi, auth_headers, body)
    assert response.status_code == 400
    assert response.json() == {"code": 40001, "message": "请求体过大（上限 64 KB）。"}
    assert not Message.objects.exists()


def test_someone_elses_conversation_is_404_and_untouched(live_asgi, agent, auth_headers, other_user):
    theirs = Conversation.objects.create(user=other_user, agent=agent, title="别人的")
    response = _post(live_asgi, auth_headers, json.dumps({"message": "偷看", "conversation_id": str(theirs.id)}))
    assert response.status_code == 404
    assert response.json() == {"code": 40401, "message": "对话不存在。"}
    assert not Message.objects.exists()
    missing = _post(live_asgi, auth_headers, json.dumps({"message": "x", "conversation_id": "5f1c2d3e-0000-4000-8000-000000000000"}))
    assert missing.status_code == 404 and missing.json() == response.json()


def test_no_agent_at_all_is_503(live_asgi, auth_headers, db):
    response = _post(live_asgi, auth_headers, json.dumps({"message": "你好"}))
    assert response.status_code == 503
    assert response.json()["code"] == 50002
    assert not Message.objects.exists()


def test_get_is_405_json(live_asgi, auth_headers, db):
    response = httpx.get(f"{live_asgi}/api/v1/chat", headers=auth_headers)
    assert response.status_code == 405
    assert response.json()["code"] == 40501
    assert response.headers["Allow"] == "POST"
