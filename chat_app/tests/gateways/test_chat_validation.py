"""Everything POST /api/v1/chat refuses before storing anything (JSON answers, docs/design.md#the-chat-stream)."""
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
        (b"\xff\xfe", "请求体必须是 UTF-8 编码的 JSON。"),
        (b'{"message": "\xed\xa0\x80"}', "请求体必须是 UTF-8 编码的 JSON。"),  # a UTF-8-encoded surrogate
        (b"[" * 1200 + b"]" * 1200, "JSON 嵌套层数过多（上限 32 层）。"),  # was a RecursionError: 500
        (b'{"message": "' + b"[" * 5000 + b'", "x": ' + b"[" * 40 + b"]" * 40 + b"}", "JSON 嵌套层数过多（上限 32 层）。"),
        (b'{"message": "\\ud800"}', "请求体含有无效的 Unicode 字符（不成对的代理项 \\ud800–\\udfff）。"),
        (b'{"message": "\\udfff\\ud800"}', "请求体含有无效的 Unicode 字符（不成对的代理项 \\ud800–\\udfff）。"),
        (b'{"message": "hi", "\\ud83d": 1}', "请求体含有无效的 Unicode 字符（不成对的代理项 \\ud800–\\udfff）。"),
        (b'{"message": "hi", "message": "again"}', "JSON 对象中有重复的字段名。"),
        (b'{"message": "hi", "n": NaN}', "JSON 数字必须是有限值（不接受 NaN、Infinity 或溢出的数）。"),
        (b'{"message": "hi", "n": 1e999}', "JSON 数字必须是有限值（不接受 NaN、Infinity 或溢出的数）。"),
        (b'{"message": "hi", "n": ' + b"9" * 5000 + b"}", "请求体必须是 JSON 对象。"),  # over int's digit limit
        (b"\xef\xbb\xbf" + json.dumps({"message": "hi"}).encode(), "请求体必须是 JSON 对象。"),  # a BOM
        (b"", "请求体必须是 JSON 对象。"),
        (b"null", "请求体必须是 JSON 对象。"),
        (b'"message"', "请求体必须是 JSON 对象。"),
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
    assert response.status_code == 413
    assert response.json() == {"code": 41301, "message": "请求体过大（上限 64 KB）。"}
    assert not Message.objects.exists()


def test_chunked_body_over_64_kb_without_content_length_is_refused(live_asgi, agent, auth_headers):
    def chunks():
        for _ in range(70):
            yield b"x" * 1024

    response = _post(live_asgi, auth_headers, chunks())
    assert response.status_code == 413
    assert response.json()["code"] == 41301
    assert not Message.objects.exists()


def test_flat_body_with_many_brackets_inside_strings_is_accepted(live_asgi, llm_settings, agent, auth_headers):
    llm_settings.reply_text("收到")
    message = "[{" * 3000 + " 数组 " + "}]" * 900
    response = _post(live_asgi, auth_headers, json.dumps({"message": message, "extra": [[["ok"]]]}))
    assert response.status_code == 200
    assert Message.objects.get(role="user").content == message


@pytest.mark.parametrize(
    "content_type",
    [None, "text/plain", "text/plain; charset=utf-8", "application/x-www-form-urlencoded", "multipart/form-data",
     "application/json; charset=latin-1", "application/json; charset=utf-16", "application/jsonx", "json"],
)
def test_a_body_not_sent_as_utf8_json_is_415(live_asgi, agent, auth_headers, content_type):
    headers = {**auth_headers, **({"Content-Type": content_type} if content_type else {})}
    response = httpx.post(f"{live_asgi}/api/v1/chat", content=json.dumps({"message": "你好"}).encode(),
                          headers=headers, timeout=10)
    assert response.status_code == 415
    assert response.json() == {"code": 41501, "message": "请求体必须是 JSON，请使用 Content-Type: application/json（UTF-8）。"}
    assert not Conversation.objects.exists() and not Message.objects.exists()


@pytest.mark.parametrize("content_type", ["application/json; charset=UTF-8", "Application/JSON", "application/json;charset=utf8"])
def test_json_content_type_variants_are_accepted(live_asgi, llm_settings, agent, auth_headers, content_type):
    llm_settings.reply_text("收到")
    response = httpx.post(f"{live_asgi}/api/v1/chat", content=json.dumps({"message": "你好"}).encode(),
                          headers={**auth_headers, "Content-Type": content_type}, timeout=10)
    assert response.status_code == 200


@pytest.mark.parametrize(
    "body",
    [b"[" * 1200 + b"]" * 1200, b"x" * (65 * 1024), b"\xff\xfe", b'{"message": "\\ud800"}', b"[]"],
    ids=["deep", "huge", "not-utf8", "surrogate", "array"],
)
@pytest.mark.parametrize("content_type", ["application/json", "text/plain"])
def test_without_credentials_it_is_401_whatever_the_body(live_asgi, agent, body, content_type):
    response = httpx.post(f"{live_asgi}/api/v1/chat", content=body, headers={"Content-Type": content_type}, timeout=10)
    assert response.status_code == 401
    assert response.json() == {"code": 40101, "message": "token_missing"}
    bad_token = httpx.post(f"{live_asgi}/api/v1/chat", content=body,
                           headers={"Content-Type": content_type, "Authorization": "Bearer nope"}, timeout=10)
    assert bad_token.status_code == 401
    assert bad_token.json() == {"code": 40101, "message": "token_invalid"}


async def test_an_unauthenticated_body_is_never_parsed(async_client, agent, auth_headers, monkeypatch):
    """401 is decided before the body is read: the body reader is not even called."""
    from chat_app.runs import chat_input

    read = []
    monkeypatch.setattr(chat_input, "json_object_read", lambda request: read.append(request) or {})
    body = {"data": b'{"message": "hi"}', "content_type": "application/json"}
    response = await async_client.post("/api/v1/chat", **body)
    assert (response.status_code, read) == (401, [])
    response = await async_client.post("/api/v1/chat", **body, headers=auth_headers)
    assert (response.status_code, len(read)) == (400, 1)  # the same body, once the caller is known
