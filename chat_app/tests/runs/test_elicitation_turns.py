"""A turn whose MCP server asks the student something (an elicitation, issue 23 point 3), end to
end on loopback: the project on uvicorn, the scripted model, the SDK-built test MCP server over
streamable-http (its `enrol` tool asks for a form of every field kind); and one whose A2A
sub-agent asks (`input-required`, point 5: a2a-sdk's server side), answered the same way.

The run waits (`elicitation_required`: the message, the form's schema and its defaults); the
student answers through `POST /api/v1/runs/<id>/approvals` (`action`, `content`), checked against
the form; the same stream goes on with the call run again and its server given the answer."""
import json

import httpx
import pytest

from agents_app.runtime.subagent_tool import NOT_ANSWERED_TEXT as SUBAGENT_NOT_ANSWERED
from chat_app.models import Message, Run, Wait
from testkit.mcp.servers import ENROL_MESSAGE
from testkit.polling import wait_for
from testkit.subagents.a2a_agent import INPUT_ANSWER, INPUT_QUESTION
from testkit.web.sse import parse_blocks, read_rest, read_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.embedded]

ANSWER = {"email": "alice@example.edu.cn", "credits": 4, "campus": "东区", "notify": False, "note": "周三下午"}


@pytest.fixture
def courses(agent_factory, mcp_service_http, mcp_pool_cleanup):
    agent_factory(mcp_services=[mcp_service_http])
    return mcp_service_http


def _asked(client, headers):
    response = client.stream("POST", "/api/v1/chat", json={"message": "帮我选课"}, headers=headers)
    opened = response.__enter__()
    blocks, raw = read_until(opened, lambda f: f["type"] == "elicitation_required")
    return opened, response, blocks, raw


def _answer(client, headers, run_id, **body):
    return client.post(f"/api/v1/runs/{run_id}/approvals", headers=headers, json=body)


def test_the_run_waits_for_the_form_and_the_answer_goes_on_in_the_same_stream(
    live_asgi, llm_settings, courses, mcp_http_server, auth_headers
):
    llm_settings.reply_tool_calls(("http-tools__enrol", {}), text="我来帮你选课。")
    llm_settings.reply_text("已选好。")
    with httpx.Client(base_url=live_asgi, timeout=20) as client:
        opened, response, blocks, raw = _asked(client, auth_headers)
        try:
            session, asked = blocks[0][1], blocks[-1][1]
            assert [f["type"] for _, f in blocks if f["type"] != "chunk"] == [
                "session", "tool_call", "elicitation_required"]
            assert (asked["message"], asked["mode"], asked["service"]) == (ENROL_MESSAGE, "form", "http-tools")
            assert asked["schema"]["properties"]["campus"]["enum"] == ["东区", "西区"]
            assert asked["defaults"] == {"credits": 3, "campus": "西区", "notify": True, "note": ""}
            run = Run.objects.get(id=session["run_id"])
            assert run.status == Run.Status.WAITING and run.slot_key == ""
            waiting = Wait.objects.get(run=run)
            assert (waiting.kind, waiting.status, waiting.ask["message"]) == ("elicitation", "pending",
                                                                              ENROL_MESSAGE)

            # A follower with no log of the run is shown the same question, rebuilt from its row.
            with client.stream("GET", f"/api/v1/runs/{run.id}/events", headers=auth_headers) as follower:
                followed, _ = read_until(follower, lambda f: f["type"] == "elicitation_required")
            assert {k: v for k, v in followed[-1][1].items()} == asked

            # What does not fit the form, or is not an answer, is refused and changes nothing.
            unfit = _answer(client, auth_headers, run.id, call_id=asked["call_id"], action="accept",
                            content={**ANSWER, "credits": "四"})
            assert unfit.status_code == 400 and "credits" in unfit.json()["message"]
            missing = _answer(client, auth_headers, run.id, call_id=asked["call_id"], action="accept", content={})
            assert missing.status_code == 400 and "email" in missing.json()["message"]
            approved = _answer(client, auth_headers, run.id, call_id=asked["call_id"], decision="approve")
            assert approved.status_code == 409 and "action" in approved.json()["message"]
            odd = _answer(client, auth_headers, run.id, call_id=asked["call_id"], action="maybe")
            assert odd.status_code == 400
            assert Wait.objects.get(run=run).status == Wait.Status.PENDING

            answered = _answer(client, auth_headers, run.id, call_id=asked["call_id"], action="accept", content=ANSWER)
            assert answered.status_code == 200
            assert answered.json() == {"call_id": asked["call_id"], "status": "approved", "resumed": True}
            rest = read_rest(opened)
        finally:
            response.__exit__(None, None, None)
    later, _ = parse_blocks(raw[raw.rfind("\n\n") + 2:] + rest)
    [result] = [f for _, f in later if f["type"] == "tool_result"]
    assert (result["tool"], result["ok"]) == ("http-tools__enrol", True)
    assert later[-1][1]["type"] == "done" and later[-1][1]["full_text"] == "我来帮你选课。已选好。"
    assert [e["action"] for e in mcp_http_server.elicitations] == ["cancel", "accept"]
    assert mcp_http_server.elicitations[-1]["content"] == ANSWER
    [tool_row] = Message.objects.filter(conversation_id=session["conversation_id"], role="tool")
    assert json.loads(tool_row.content) == {"action": "accept", "content": ANSWER}
    stored = Wait.objects.get(run=run)
    assert (stored.status, stored.answer) == ("approved", {"action": "accept", "content": ANSWER})
    wait_for(lambda: Run.objects.filter(id=run.id, status=Run.Status.FINISHED).exists(), what="the run's end")


def test_a_declined_form_is_the_servers_to_hear_and_an_approval_takes_no_answer(
    live_asgi, llm_settings, courses, mcp_http_server, auth_headers
):
    llm_settings.reply_tool_calls(("http-tools__enrol", {}))
    llm_settings.reply_text("好的，不选了。")
    with httpx.Client(base_url=live_asgi, timeout=20) as client:
        opened, response, blocks, raw = _asked(client, auth_headers)
        try:
            run_id, asked = blocks[0][1]["run_id"], blocks[-1][1]
            declined = _answer(client, auth_headers, run_id, call_id=asked["call_id"], decision="reject")
            assert declined.status_code == 200 and declined.json()["status"] == "rejected"
            rest = read_rest(opened)
        finally:
            response.__exit__(None, None, None)
    later, _ = parse_blocks(rest)
    assert later[-1][1]["full_text"] == "好的，不选了。"
    assert [e["action"] for e in mcp_http_server.elicitations] == ["cancel", "decline"]
    assert Wait.objects.get(run_id=run_id).answer == {"action": "decline"}


# --- an A2A sub-agent that asks the student (input-required, issue 23 point 5) ---------------

@pytest.fixture
def library(agent_factory, a2a_sub_agent_factory):
    return agent_factory(sub_agents=[a2a_sub_agent_factory("stream", display_name="图书馆助手", timeout_sec=10)])


def test_an_a2a_agents_question_is_answered_and_the_same_task_goes_on(
    live_asgi, llm_settings, library, a2a_server, auth_headers
):
    llm_settings.reply_tool_calls(("call_library", {"message": "[[mode:input]] 图书馆几点关门"}))
    llm_settings.reply_text("东区图书馆开到 22:00。")
    with httpx.Client(base_url=live_asgi, timeout=20) as client:
        opened, response, blocks, raw = _asked(client, auth_headers)
        try:
            run_id, asked = blocks[0][1]["run_id"], blocks[-1][1]
            assert (asked["service"], asked["message"], asked["mode"]) == ("图书馆助手", INPUT_QUESTION, "form")
            assert list(asked["schema"]["properties"]) == ["answer"] and asked["schema"]["required"] == ["answer"]
            assert "resume" not in asked  # the task's ids stay on the server
            empty = _answer(client, auth_headers, run_id, call_id=asked["call_id"], action="accept", content={})
            assert empty.status_code == 400
            answered = _answer(client, auth_headers, run_id, call_id=asked["call_id"], action="accept",
                               content={"answer": "东区"})
            assert answered.status_code == 200 and answered.json()["resumed"] is True
            rest = read_rest(opened)
        finally:
            response.__exit__(None, None, None)
    later, _ = parse_blocks(rest)
    [result] = [f for _, f in later if f["type"] == "tool_result"]
    assert result["ok"] is True
    assert later[-1][1]["full_text"] == "东区图书馆开到 22:00。"
    [(task_id, text)] = a2a_server.continued  # one message, on the task that asked
    assert text == "东区" and a2a_server.messages == ["[[mode:input]] 图书馆几点关门", "东区"]
    [tool_row] = Message.objects.filter(request_id=Run.objects.get(id=run_id).request_id, role="tool")
    assert tool_row.content == INPUT_ANSWER.format(answer="东区")
    assert a2a_server.cancelled_tasks == []


def test_declining_an_a2a_agents_question_cancels_its_task(live_asgi, llm_settings, library, a2a_server,
                                                           auth_headers):
    llm_settings.reply_tool_calls(("call_library", {"message": "[[mode:input]] 图书馆几点关门"}))
    llm_settings.reply_text("好的。")
    with httpx.Client(base_url=live_asgi, timeout=20) as client:
        opened, response, blocks, raw = _asked(client, auth_headers)
        try:
            run_id, asked = blocks[0][1]["run_id"], blocks[-1][1]
            declined = _answer(client, auth_headers, run_id, call_id=asked["call_id"], action="decline")
            assert declined.status_code == 200
            rest = read_rest(opened)
        finally:
            response.__exit__(None, None, None)
    later, _ = parse_blocks(rest)
    [result] = [f for _, f in later if f["type"] == "tool_result"]
    assert (result["ok"], result["error"]) == (False, SUBAGENT_NOT_ANSWERED[1])
    assert a2a_server.cancelled.wait(5) and len(a2a_server.cancelled_tasks) == 1
    assert a2a_server.continued == []


def test_an_expired_question_hands_its_tool_a_cancel_only_when_something_waits_on_it(user):
    from datetime import timedelta

    from django.utils import timezone

    from chat_app.models import Conversation
    from chat_app.runs.wait import _answers

    conversation = Conversation.objects.create(user=user, title="问")
    run = Run.objects.create(conversation=conversation, user=user, heartbeat_at=timezone.now())
    task = {"task_id": "t-1", "context_id": "c-1"}
    for seq, call_id, kind, answer in ((1, "a2a", "question", {"action": "accept", "content": {"answer": "东区"}}),
                                       (2, "a2a", "question", None), (1, "mcp", "elicitation", None)):
        ask = {"message": "?", "resume": task} if kind == "question" else {"message": "?", "mode": "form"}
        Wait.objects.create(run=run, call_id=call_id, tool="t", pause_seq=seq, kind=kind, ask=ask, answer=answer,
                            status="approved" if answer else "expired", expires_at=timezone.now() - timedelta(1))
    assert _answers(run, ["a2a", "mcp"]) == {"a2a": (
        {"action": "accept", "content": {"answer": "东区"}, "resume": task}, {"action": "cancel", "resume": task})}


HOSTILE_ANSWERS = [
    ({"action": "accept", "content": ["东区"]}, 400, "content"),  # not an object
    ({"action": "accept", "content": {"email": "a@b.cn", "note": "长" * 2001}}, 400, "2000"),
    ({"action": "accept", "content": {"email": "a@b.cn", "admin": True}}, 400, "admin"),  # not asked for
    ({"action": "accept", "content": {"email": "a@b.cn", "credits": True}}, 400, "credits"),  # a bool is no integer
    ({"action": "accept", "content": {"email": "a@b.cn", "campus": "南区"}}, 400, "campus"),  # not a choice
    ({"action": 1}, 400, "action"),
    ({"action": "ACCEPT"}, 400, "action"),
    ({"action": "accept", "content": {"email": "a@b.cn"}, "call_id": "call_approval"}, 409, "decision"),
    ({"decision": "approve"}, 409, "action"),
]


@pytest.mark.parametrize(("body", "status", "named"), HOSTILE_ANSWERS)
def test_a_hostile_answer_is_refused_with_its_reason_and_nothing_is_recorded(live_asgi, user, auth_headers, body,
                                                                             status, named):
    from django.utils import timezone

    from chat_app.models import Conversation

    conversation = Conversation.objects.create(user=user, title="选课")
    run = Run.objects.create(conversation=conversation, user=user, heartbeat_at=timezone.now(), frames_seq=4,
                             status=Run.Status.WAITING)
    schema = {"type": "object", "required": ["email"], "properties": {
        "email": {"type": "string"}, "note": {"type": "string"}, "credits": {"type": "integer"},
        "campus": {"type": "string", "enum": ["东区", "西区"]}}}
    later = timezone.now() + timezone.timedelta(minutes=10)
    Wait.objects.create(run=run, call_id="call_form", tool="courses__enrol", pause_seq=4, kind="elicitation",
                        ask={"message": "?", "mode": "form", "schema": schema}, expires_at=later)
    Wait.objects.create(run=run, call_id="call_approval", tool="courses__drop", pause_seq=4, expires_at=later)
    answer = httpx.post(f"{live_asgi}/api/v1/runs/{run.id}/approvals", headers=auth_headers, timeout=20,
                        json={"call_id": "call_form", **body})
    assert answer.status_code == status and named in answer.json()["message"], answer.text
    assert set(Wait.objects.filter(run=run).values_list("status", flat=True)) == {"pending"}
    assert not Wait.objects.filter(run=run, answer__isnull=False).exists()
