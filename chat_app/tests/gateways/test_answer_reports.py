"""Reports of answers (举报, issue 44 point 5) through the real ASGI app: filed once (201, then the
same report 200), only on the caller's own AI answers, checked, rate-limited, audited, and shown
on the message list afterwards."""
import uuid
from datetime import timedelta

import httpx
import pytest
from django.utils import timezone

from audit_app.models import AuditEvent
from chat_app.models import Conversation, Message
from safety_app.models import AnswerReport

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.embedded]


@pytest.fixture
def api(live_asgi, auth_headers):
    with httpx.Client(base_url=live_asgi, headers=auth_headers, timeout=10) as client:
        yield client


def _turn(owner, question: str, answer: str, *, title: str = "食堂") -> list[Message]:
    """A stored turn: the question, an assistant row that called a tool (with text before the call),
    the tool's row, the final answer."""
    conversation = Conversation.objects.create(user=owner, title=title)
    when = timezone.now() - timedelta(minutes=5)
    rows = [
        Message.objects.create(conversation=conversation, role="user", content=question),
        Message.objects.create(conversation=conversation, role="assistant", content="我查一下菜单。", seq=1,
                               meta={"tool_calls": [{"id": "c1", "type": "function",
                                                     "function": {"name": "call_canteen", "arguments": "{}"}}]}),
        Message.objects.create(conversation=conversation, role="tool", content="工具结果", seq=2,
                               meta={"tool_call_id": "c1", "tool": "call_canteen", "ok": True}),
        Message.objects.create(conversation=conversation, role="assistant", content=answer, seq=3,
                               agent_name="校园小智"),
    ]
    Message.objects.filter(id=rows[0].id).update(created_at=when)
    Message.objects.filter(id__in=[r.id for r in rows[1:]]).update(created_at=when + timedelta(seconds=5))
    return rows


def _url(message_id) -> str:
    return f"/api/v1/messages/{message_id}/report"


def test_a_report_is_filed_once_with_the_turn_copied_and_audited(api, user):
    *_, answer = _turn(user, "一食堂吃什么", "红烧肉 12 元")

    filed = api.post(_url(answer.id), json={"reason": "false", "detail": " 今天\u202e是 15 元\x00 "})

    assert filed.status_code == 201, filed.text
    body = filed.json()
    assert body["status"] == "pending" and body["status_label"] == "待处理" and body["reason"] == "false"
    assert body["message_id"] == str(answer.id) and body["created_at"]
    report = AnswerReport.objects.get()
    assert report.id == body["id"] and report.reporter_id == user.id
    assert (report.question, report.answer) == ("一食堂吃什么", "我查一下菜单。\n\n红烧肉 12 元")
    assert (report.conversation_id, report.agent_name, report.detail) == (
        answer.conversation_id, "校园小智", "今天是 15 元")
    audit = AuditEvent.objects.get(event="report_filed")
    assert (audit.actor_id, audit.target) == (user.id, f"safety_app.answerreport:{report.id}")
    assert audit.details == {"reason": "false", "message_id": str(answer.id),
                             "conversation_id": str(answer.conversation_id)}

    again = api.post(_url(answer.id), json={"reason": "other"})  # the same answer: the same report
    assert again.status_code == 200 and again.json() == body
    assert AnswerReport.objects.count() == 1 and AuditEvent.objects.filter(event="report_filed").count() == 1

    # The conversation goes; the report and what was reported stay.
    assert api.delete(f"/api/v1/conversations/{answer.conversation_id}").status_code == 204
    assert not Message.objects.filter(id=answer.id).exists()
    assert AnswerReport.objects.get().answer.endswith("红烧肉 12 元")


def test_the_message_list_says_which_answers_were_reported(api, user):
    rows = _turn(user, "一食堂吃什么", "红烧肉 12 元")
    assert api.post(_url(rows[-1].id), json={"reason": "illegal"}).status_code == 201
    AnswerReport.objects.update(status="handling")

    listed = api.get(f"/api/v1/conversations/{rows[0].conversation_id}/messages").json()["results"]

    assert [(m["id"], m["report_status"]) for m in listed] == [
        (str(rows[0].id), None), (str(rows[1].id), None), (str(rows[2].id), None), (str(rows[3].id), "handling"),
    ]


def test_only_an_answer_of_ones_own_conversation_is_reported(api, user, other_user):
    mine = _turn(user, "问题", "回答")
    theirs = _turn(other_user, "别人的问题", "别人的回答", title="别人的")

    for target in (theirs[-1].id, theirs[0].id, uuid.uuid4()):
        refused = api.post(_url(target), json={"reason": "other"})
        assert refused.status_code == 404 and refused.json() == {"code": 40401, "message": "消息不存在。"}
    for target in (mine[0].id, mine[2].id):  # a question, a tool's result
        refused = api.post(_url(target), json={"reason": "other"})
        assert refused.status_code == 400 and refused.json() == {
            "code": 40002, "message": "只能举报 AI 的回答，不能举报提问或工具结果。"}
    assert not AnswerReport.objects.exists() and not AuditEvent.objects.filter(event="report_filed").exists()


def test_a_bad_body_is_refused_with_the_apis_codes(api, user):
    answer = _turn(user, "问题", "回答")[-1]

    for body in ({}, {"reason": "boring"}, {"reason": 3}, {"reason": "other", "detail": "长" * 501},
                 {"reason": "other", "detail": 5}, ["other"]):
        refused = api.post(_url(answer.id), json=body)
        assert refused.status_code == 400 and refused.json()["code"] == 40001, body
    unknown = api.post(_url(answer.id), json={"reason": "boring"}).json()["message"]
    assert unknown.startswith("reason: reason 只能是：illegal, sexual, false,")
    too_long = api.post(_url(answer.id), json={"reason": "other", "detail": "长" * 501}).json()["message"]
    assert too_long == "detail: 说明不能超过 500 个字符。"
    not_json = api.post(_url(answer.id), content=b"{reason", headers={"Content-Type": "application/json"})
    assert not_json.status_code == 400 and not_json.json()["code"] == 40001
    assert api.post(_url(answer.id), json={"reason": "other", "detail": "长" * 500}).status_code == 201


def test_new_reports_past_the_hourly_limit_are_refused(api, user, settings):
    settings.REPORTS_PER_HOUR = 2
    answers = [_turn(user, f"问题{i}", f"回答{i}", title=f"对话{i}")[-1] for i in range(3)]

    codes = [api.post(_url(a.id), json={"reason": "other"}).status_code for a in answers]

    assert codes == [201, 201, 429]
    flood = api.post(_url(answers[2].id), json={"reason": "other"})
    assert flood.status_code == 429 and flood.headers["Retry-After"] == "3600"
    assert flood.json() == {"code": 42908, "message": "举报太频繁了（每小时最多 2 次），请稍后再试。"}
    assert api.post(_url(answers[0].id), json={"reason": "other"}).status_code == 200  # an old one is still answered
    assert AnswerReport.objects.count() == 2


def test_the_page_session_reports_with_its_csrf_token(live_asgi, user, password):
    answer = _turn(user, "问题", "回答")[-1]
    with httpx.Client(base_url=live_asgi, timeout=10) as browser:
        login = browser.get("/login/")
        token = browser.cookies["csrftoken"]
        signed_in = browser.post("/login/", data={"username": user.username, "password": password,
                                                  "csrfmiddlewaretoken": token}, headers={"Referer": f"{live_asgi}/login/"})
        assert login.status_code == 200 and signed_in.status_code == 302
        refused = browser.post(_url(answer.id), json={"reason": "other"}, headers={"Referer": f"{live_asgi}/"})
        assert refused.status_code == 403 and refused.json()["code"] == 40301
        filed = browser.post(_url(answer.id), json={"reason": "other"},
                             headers={"X-CSRFToken": browser.cookies["csrftoken"], "Referer": f"{live_asgi}/"})
        assert filed.status_code == 201


def test_a_personal_api_key_reports_as_its_user(live_asgi, user):
    from chat_app.accounts.api_keys import api_key_create

    answer = _turn(user, "问题", "回答")[-1]
    _, key = api_key_create(user=user, name="Cherry Studio")
    with httpx.Client(base_url=live_asgi, headers={"Authorization": f"Bearer {key}"}, timeout=10) as app:
        filed = app.post(_url(answer.id), json={"reason": "harmful"})

    assert filed.status_code == 201 and AnswerReport.objects.get().reporter_id == user.id
