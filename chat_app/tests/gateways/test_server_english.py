"""What the server itself writes for a student is in the student's language (issue 26 point 2,
docs/design.md#cross-cutting-rules): API error messages follow the request's language (the page's cookie, else
`Accept-Language`); the texts the gateway writes into a run (notices, errors, the keyword
routing's answer, a call not run) follow the language the student asked in — on whichever worker
resumes or reaps the run, whatever language the request that resumed it spoke. Texts written for
the model stay Chinese (the model is told which language to answer in: loop.LANGUAGE_TEXT)."""
import socket
from datetime import timedelta

import httpx
import pytest
from django.utils import timezone

from chat_app.models import Conversation, Message, Run
from chat_app.runs.state import runs_reap
from testkit.web.sse import chat, parse_blocks, read_rest, read_until

pytestmark = pytest.mark.django_db(transaction=True)

ENGLISH = {"Accept-Language": "en-US,en;q=0.9"}
CHINESE = {"Accept-Language": "zh-CN,zh;q=0.9"}


def _refusal(response) -> tuple[int, int, str]:
    body = response.json()
    return response.status_code, body["code"], body["message"]


def test_api_errors_are_written_in_the_request_language(live_asgi, agent, auth_headers):
    with httpx.Client(base_url=live_asgi, timeout=10) as client:
        def ask(body, headers, **kw):
            return client.post("/api/v1/chat", headers={**auth_headers, **headers}, **(kw or {"json": body}))

        assert _refusal(ask({"message": ""}, ENGLISH)) == (400, 40001, "message must not be empty.")
        assert _refusal(ask({"message": ""}, {})) == (400, 40001, "message 不能为空。")  # no header: Chinese
        assert _refusal(ask({"message": ""}, CHINESE)) == (400, 40001, "message 不能为空。")
        not_an_object = ask(None, {**ENGLISH, "Content-Type": "application/json"}, content=b"[1]")
        assert _refusal(not_an_object) == (400, 40001, "The request body must be a JSON object.")
        missing = "00000000-0000-4000-8000-000000000000"
        gone = client.get(f"/api/v1/conversations/{missing}", headers={**auth_headers, **ENGLISH})
        assert _refusal(gone) == (404, 40401, "No such conversation.")
        # The page's cookie chooses as the header does.
        client.cookies.set("django_language", "en")
        assert _refusal(ask({"message": "x" * 8001}, {}))[2] == "message must not be longer than 8000 characters."
        title = client.patch(f"/api/v1/conversations/{missing}", json={"title": ""}, headers=auth_headers)
        assert title.status_code in (400, 404) and not any("\u4e00" <= c <= "\u9fff" for c in title.text)


def test_the_keyword_routing_answers_an_english_student_in_english(
    live_asgi, settings, agent, auth_headers, subagent_server
):
    settings.LLM_BASE_URL = ""  # no model: keyword routing answers
    english = chat(live_asgi, {"message": "食堂今天吃什么"}, headers={**auth_headers, **ENGLISH})
    assert english.status == 200 and english.frames[-1].get("fallback") is True
    assert english.text.startswith("(No AI model is set up; keyword matching passed your question to “")
    chinese = chat(live_asgi, {"message": "食堂今天吃什么"}, headers=auth_headers)
    assert chinese.text.startswith("（未配置 AI 模型，以下内容由关键词匹配自动转给“")
    assert Run.objects.get(id=english.frames[0]["run_id"]).language == "en"
    assert Run.objects.get(id=chinese.frames[0]["run_id"]).language == "zh-hans"


def test_a_sub_agent_that_cannot_be_reached_is_explained_in_english(
    live_asgi, llm_settings, agent_factory, sub_agent_factory, auth_headers
):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    agent_factory(sub_agents=[sub_agent_factory(base_url=f"http://127.0.0.1:{port}", timeout_sec=2)])
    llm_settings.reply_tool_calls(("call_canteen", {"message": "What's for lunch?"}))
    llm_settings.reply_text("The canteen can't be reached right now.")
    result = chat(live_asgi, {"message": "What's for lunch?"}, headers={**auth_headers, **ENGLISH}, timeout=10)
    notice = "The “食堂助手” service cannot be reached right now. Please try again later."
    assert result.of("tool_result")[0]["error"] == notice
    assert result.of("error") == [{"type": "error", "code": 50003, "message": notice}]
    reply = Message.objects.get(id=result.frames[-1]["message_id"])
    assert reply.meta["errors"] == [{"code": 50003, "message": notice}]
    # What the model reads of the failure stays the gateway's Chinese, with the reason.
    assert llm_settings.requests[1].messages[-1]["content"].startswith("调用子 Agent 失败")


def test_a_paused_run_goes_on_in_its_own_language_whoever_answers(
    live_asgi, llm_settings, agent, sub_agent, auth_headers, subagent_server
):
    sub_agent.approval_policy = "ask"
    sub_agent.save()
    llm_settings.reply_tool_calls(("call_canteen", {"message": "Order lunch"}))
    llm_settings.reply_text("All right, no lunch.")
    with httpx.Client(base_url=live_asgi, timeout=15) as client:
        with client.stream("POST", "/api/v1/chat", json={"message": "Order me lunch"},
                           headers={**auth_headers, **ENGLISH}) as response:
            blocks, _ = read_until(response, lambda f: f["type"] == "approval_required")
            run_id, call_id = blocks[0][1]["run_id"], blocks[-1][1]["call_id"]
            # Decided from a device that reads Chinese: the run's texts stay the run's.
            decided = client.post(f"/api/v1/runs/{run_id}/approvals", json={"call_id": call_id, "decision": "reject"},
                                  headers={**auth_headers, **CHINESE})
            assert decided.json()["status"] == "rejected"
            rest, _ = parse_blocks(read_rest(response))
    result = next(f for _, f in rest if f["type"] == "tool_result")
    assert (result["ok"], result["error"]) == (False, "Rejected; not run.")
    assert rest[-1][1]["full_text"] == "All right, no lunch."
    assert llm_settings.requests[1].messages[-1]["content"].startswith("学生拒绝了这次操作")


def test_a_waiting_run_stopped_is_marked_in_its_language_and_refuses_a_question_meanwhile(
    live_asgi, llm_settings, agent, sub_agent, auth_headers
):
    sub_agent.approval_policy = "ask"
    sub_agent.save()
    llm_settings.reply_tool_calls(("call_canteen", {"message": "Order lunch"}))
    with httpx.Client(base_url=live_asgi, timeout=15) as client:
        with client.stream("POST", "/api/v1/chat", json={"message": "Order me lunch"},
                           headers={**auth_headers, **ENGLISH}) as response:
            blocks, _ = read_until(response, lambda f: f["type"] == "approval_required")
    session = blocks[0][1]
    refused = httpx.post(f"{live_asgi}/api/v1/chat", json={"message": "Hi", "conversation_id": session["conversation_id"]},
                         headers={**auth_headers, **ENGLISH})
    assert refused.status_code == 409
    assert refused.json()["message"].startswith("This conversation’s last turn has not ended yet")
    httpx.post(f"{live_asgi}/api/v1/runs/{session['run_id']}/stop", headers={**auth_headers, **CHINESE})
    closed = Message.objects.get(id=session["message_id"])
    assert closed.meta["errors"][0]["message"] == "The answer was stopped."
    tool_row = Message.objects.get(conversation_id=session["conversation_id"], role="tool")
    assert tool_row.meta["error"] == "The answer was stopped; the action was not run."


def test_a_run_whose_worker_died_is_marked_in_its_language(user, agent):
    stale = timezone.now() - timedelta(seconds=30)
    runs = {}
    for language in ("en", ""):
        conversation = Conversation.objects.create(user=user, agent=agent, title="lunch")
        Message.objects.create(conversation=conversation, role="user", content="What's for lunch?")
        runs[language] = Run.objects.create(conversation=conversation, user=user, worker="dead-host:1:abc",
                                            heartbeat_at=stale, partial_text="Today", language=language)
    assert {r.id for r in runs_reap(stale_sec=10)} == {r.id for r in runs.values()}
    marks = {language: Message.objects.get(id=run.message_id).meta["errors"][0]["message"]
             for language, run in runs.items()}
    assert marks == {"en": "The server process stopped unexpectedly; the answer is not finished.",
                     "": "服务进程意外中断，回答未完成。"}
