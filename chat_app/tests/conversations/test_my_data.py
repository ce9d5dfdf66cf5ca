"""A student's own data (issue 25 point 4, docs/design.md#cross-cutting-rules): all of it as one JSON download with no
secret in it, all their conversations deleted at their word, and conversations past the retention
period purged by `manage.py purge_conversations`."""
import json
import uuid
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from rest_framework.test import APIClient

from agents_app.models import McpOAuthGrant, McpService
from agents_app.runtime.events import Chunk, Done, ToolCall, ToolResult
from campus_agent.base.crypto import secret_encrypt
from chat_app.accounts.api_keys import api_key_create
from chat_app.models import AuthSession, Conversation, Feedback, Message, Run
from chat_app.runs.recording import TurnRecorder, turn_store
from safety_app.models import AnswerReport

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]


def _client(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


@pytest.fixture
def history(user, other_user):
    mine = Conversation.objects.create(user=user, title="食堂")
    Message.objects.create(conversation=mine, role="user", content="今天吃什么", seq=1)
    answer = Message.objects.create(conversation=mine, role="assistant", content="红烧肉", seq=2,
                                    meta={"reasoning": "想一想"})
    Feedback.objects.create(user=user, message=answer, rating="up", comment="好")
    AnswerReport.objects.create(reporter=user, message_id=answer.id, conversation_id=mine.id, question="今天吃什么",
                                answer="红烧肉", reason="false", detail="没有红烧肉", outcome="staff-note-only")
    theirs = Conversation.objects.create(user=other_user, title="别人的")
    Message.objects.create(conversation=theirs, role="user", content="别人的问题", seq=1)
    return mine, theirs


def test_the_export_holds_everything_of_the_user_and_no_secret(user, token_for, history):
    jwt = token_for(user, campus_token="campus-secret-token")
    _, key = api_key_create(user=user, name="app")
    library = McpService.objects.create(name="library", display_name="图书馆", protocol="streamable-http",
                                        config={"url": "https://lib.example.edu.cn/mcp", "oauth": {}})
    McpOAuthGrant.objects.create(user=user, service=library, scope="loans",
                                 tokens_encrypted=secret_encrypt('{"access_token": "lib-access-token-1"}'))
    answer = _client(jwt).get("/api/v1/me/export")
    assert answer.status_code == 200 and answer["Content-Disposition"].startswith("attachment;")
    assert answer["Cache-Control"] == "no-store"
    raw = answer.content.decode()
    data = json.loads(raw)
    assert data["format"] == "campus-agent-export/1" and data["user"]["username"] == user.username
    (conversation,) = data["conversations"]
    assert [m["content"] for m in conversation["messages"]] == ["今天吃什么", "红烧肉"]
    assert conversation["messages"][1]["meta"]["reasoning"] == "想一想"
    assert data["feedback"][0]["comment"] == "好" and data["api_keys"][0]["name"] == "app"
    assert data["login_sessions"][0]["via"] == AuthSession.Via.SSO
    assert [(a["service"], a["scope"]) for a in data["connected_accounts"]] == [("图书馆", "loans")]
    (report,) = data["reports"]
    assert (report["reason"], report["detail"], report["answer"], report["status"]) == ("false", "没有红烧肉", "红烧肉", "pending")
    for secret in ("campus-secret-token", key, jwt, user.password, "别人的", "lib-access-token-1", "staff-note-only"):
        assert secret not in raw


def test_each_ai_message_of_the_export_carries_its_labels(user, token_for, settings):
    """GB 45438-2025 (docs/safety.md, "Labels"): every assistant row of a turn as the run stores it
    (a tool round's text and the reply) carries the visible label and `aigc` naming it, the
    producer and who answered; the question, the tool row and a message a client brought along
    carry none."""
    settings.AIGC_CONTENT_PRODUCER = "示例大学"
    conversation = Conversation.objects.create(user=user, title="食堂")
    Message.objects.create(conversation=conversation, role="user", content="之前的问题", seq=1,
                           meta={"from_client": True})
    Message.objects.create(conversation=conversation, role="assistant", content="客户端自己的回答", seq=2,
                           meta={"from_client": True})
    Message.objects.create(conversation=conversation, role="user", content="今天吃什么", seq=3, request_id="req-1")
    recorder = TurnRecorder()
    for event in (Chunk("我查一下。"), ToolCall(call_id="c1", tool="call_canteen", args="{}"),
                  ToolResult(call_id="c1", tool="call_canteen", ok=True, content="红烧肉"), Chunk("今天有红烧肉。"),
                  Done(full_text="我查一下。今天有红烧肉。", provider="学校的模型", model="qwen-plus")):
        recorder.add(event)
    reply_id = uuid.uuid4()
    turn_store(conversation_id=conversation.id, final_message_id=reply_id, rows=recorder.rows(),
               agent_name="校园小智", request_id="req-1")

    data = _client(token_for(user)).get("/api/v1/me/export").json()
    messages = data["conversations"][0]["messages"]
    labelled = [(m["content"], m.get("label"), m.get("aigc")) for m in messages]
    round_row = next(m for m in messages if m["content"] == "我查一下。")

    def aigc(produce_id) -> dict:
        return {"Label": "1", "ContentProducer": "示例大学", "ProduceID": produce_id, "ReservedCode1": "",
                "ContentPropagator": "", "PropagateID": "", "ReservedCode2": "", "provider": "学校的模型",
                "model": "qwen-plus"}

    assert labelled == [
        ("之前的问题", None, None), ("客户端自己的回答", None, None), ("今天吃什么", None, None),
        ("我查一下。", "内容由 AI 生成", aigc(round_row["id"])), ("红烧肉", None, None),
        ("今天有红烧肉。", "内容由 AI 生成", aigc(str(reply_id))),
    ]


def test_a_key_can_neither_export_nor_delete(user, history):
    _, key = api_key_create(user=user, name="app")
    assert _client(key).get("/api/v1/me/export").status_code == 403
    assert _client(key).delete("/api/v1/me/conversations").status_code == 403
    assert Conversation.objects.filter(user=user).count() == 1
    assert APIClient().get("/api/v1/me/export").status_code == 401


def test_deleting_all_takes_only_the_callers_conversations(user, other_user, token_for, history):
    answer = _client(token_for(user)).delete("/api/v1/me/conversations")
    assert answer.status_code == 200 and answer.json() == {"deleted": 1}
    assert not Conversation.objects.filter(user=user).exists()
    assert not Message.objects.filter(conversation__user=user).exists() and not Feedback.objects.exists()
    assert Conversation.objects.filter(user=other_user).count() == 1


def _aged(conversation, days: int) -> None:
    Conversation.objects.filter(id=conversation.id).update(updated_at=timezone.now() - timedelta(days=days))


def test_purge_deletes_conversations_past_the_retention_but_not_a_running_one(user, history, settings):
    mine, theirs = history
    _aged(mine, 40)
    _aged(theirs, 10)
    running = Conversation.objects.create(user=user, title="还在答")
    Run.objects.create(conversation=running, user=user, request_id="r1", status=Run.Status.RUNNING,
                       heartbeat_at=timezone.now())
    _aged(running, 40)
    out = StringIO()
    call_command("purge_conversations", "--older-than", "30", "--dry-run", stdout=out)
    assert "将删除 1 个" in out.getvalue() and Conversation.objects.count() == 3
    settings.RETENTION_DAYS = 30
    call_command("purge_conversations", stdout=out)
    assert set(Conversation.objects.values_list("title", flat=True)) == {"别人的", "还在答"}
    assert not Message.objects.filter(conversation_id=mine.id).exists()


def test_purge_needs_a_period(settings):
    settings.RETENTION_DAYS = 0
    with pytest.raises(CommandError):
        call_command("purge_conversations")
    with pytest.raises(CommandError):
        call_command("purge_conversations", "--older-than", "0")


def test_a_student_lists_and_disconnects_their_connected_accounts(user, other_user, token_for):
    library = McpService.objects.create(name="library", display_name="图书馆", protocol="streamable-http",
                                        config={"url": "https://lib.example.edu.cn/mcp", "oauth": {}})
    mine = McpOAuthGrant.objects.create(user=user, service=library, scope="loans",
                                        tokens_encrypted=secret_encrypt('{"access_token": "lib-access-token-1"}'))
    theirs = McpOAuthGrant.objects.create(user=other_user, service=library,
                                          tokens_encrypted=secret_encrypt('{"access_token": "lib-access-token-2"}'))
    client = _client(token_for(user))
    listed = client.get("/api/v1/me/accounts")
    assert listed.status_code == 200
    assert [(a["id"], a["service"], a["scope"]) for a in listed.json()] == [(mine.id, "图书馆", "loans")]
    assert "lib-access-token" not in listed.content.decode()
    assert client.delete(f"/api/v1/me/accounts/{theirs.id}").status_code == 404  # not theirs to cut
    assert client.delete(f"/api/v1/me/accounts/{mine.id}").status_code == 204
    assert client.delete(f"/api/v1/me/accounts/{mine.id}").status_code == 404
    assert list(McpOAuthGrant.objects.values_list("user_id", flat=True)) == [other_user.id]
    _, key = api_key_create(user=other_user, name="app")
    assert _client(key).get("/api/v1/me/accounts").status_code == 403  # a key cannot see or cut them
    assert _client(key).delete(f"/api/v1/me/accounts/{theirs.id}").status_code == 403
    assert APIClient().get("/api/v1/me/accounts").status_code == 401
