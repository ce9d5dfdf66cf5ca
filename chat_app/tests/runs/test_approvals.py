"""Approval before a tool runs (docs/design.md#runs, issue 12), on the embedded backend: one worker.

Real ASGI app on loopback, the scripted model, the contract sub-agent and the MCP test server.
The run pauses with `approval_required`, holds no stream slot while it waits, and goes on when
the student decides (`POST /api/v1/runs/<id>/approvals`) or the time runs out. Across two
worker processes and a restart: test_approvals_workers.py.
"""
import json
import threading
import uuid

import httpx
import pytest
from django.utils import timezone

from chat_app.models import Message, Run, Wait
from chat_app.runs.bus import run_bus
from chat_app.runs.state import local_runs
from testkit.model.fake_llm import Reply, ScriptedCall
from testkit.polling import wait_for
from testkit.web.sse import chat, parse_blocks, read_rest, read_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.embedded]

REJECTED_FOR_MODEL = "学生拒绝了这次操作，工具没有运行。"
EXPIRED_FOR_MODEL = "等待学生批准超时，工具没有运行。"


@pytest.fixture
def asking_canteen(sub_agent):
    sub_agent.approval_policy = "ask"
    sub_agent.save()
    return sub_agent


def _decide(base_url, run_id, call_id, decision, headers):
    return httpx.post(f"{base_url}/api/v1/runs/{run_id}/approvals", json={"call_id": call_id, "decision": decision},
                      headers=headers, timeout=10)


def _asked_then_left(base_url, headers, message="订午饭") -> list:
    """Asks, reads the stream up to the first `approval_required`, and leaves (a reload)."""
    with httpx.Client(base_url=base_url, timeout=15) as client:
        with client.stream("POST", "/api/v1/chat", json={"message": message}, headers=headers) as response:
            blocks, _ = read_until(response, lambda f: f["type"] == "approval_required")
    return blocks


class _Follower:
    """A second client following a run (`GET …/events`) in a thread, as a reloaded page does."""

    def __init__(self, base_url, run_id, headers, params=None):
        self._seen, self._blocks, self._rest = threading.Event(), [], ""
        self._thread = threading.Thread(target=self._follow, args=(base_url, run_id, headers, params))
        self._thread.start()

    def _follow(self, base_url, run_id, headers, params):
        with httpx.Client(base_url=base_url, timeout=15) as client:
            with client.stream("GET", f"/api/v1/runs/{run_id}/events", params=params, headers=headers) as response:
                self._blocks, _ = read_until(response, lambda f: f["type"] == "approval_required")
                self._seen.set()
                self._rest = read_rest(response)

    def asked(self) -> list:
        """The blocks up to the first `approval_required`, once it came."""
        assert self._seen.wait(10), "no approval_required reached the follower"
        return self._blocks

    def rest(self) -> list:
        """The blocks after it, to the stream's end."""
        self._thread.join(10)
        return parse_blocks(self._rest)[0]


def _rows(conversation_id):
    return list(Message.objects.filter(conversation_id=conversation_id).order_by("created_at", "seq"))


def _tool_messages(request) -> list[dict]:
    return [m for m in request.messages if m["role"] == "tool"]


def test_approve_runs_the_tool_and_the_answer_goes_on_in_the_same_stream(
    live_asgi, llm_settings, agent, asking_canteen, auth_headers, subagent_server
):
    llm_settings.reply_tool_calls(("call_canteen", {"message": "帮我订一份午饭"}), text="需要你确认。")
    llm_settings.reply_text("已经为你订好了。")
    with httpx.Client(base_url=live_asgi, timeout=15) as client:
        with client.stream("POST", "/api/v1/chat", json={"message": "订午饭"}, headers=auth_headers) as response:
            blocks, raw = read_until(response, lambda f: f["type"] == "approval_required")
            session = blocks[0][1]
            asked = blocks[-1][1]
            assert [f["type"] for _, f in blocks if f["type"] != "chunk"] == ["session", "tool_call", "approval_required"]
            assert asked["call_id"] == blocks[-2][1]["call_id"] and asked["tool"] == "call_canteen"
            assert json.loads(asked["args"]) == {"message": "帮我订一份午饭"} and asked["expires_at"]
            run = Run.objects.get(id=session["run_id"])
            assert run.status == Run.Status.WAITING and run.worker == "" and run.slot_key == ""
            assert subagent_server.requests == []  # nothing ran before the decision
            stored = _rows(session["conversation_id"])
            assert [r.role for r in stored] == ["user", "assistant"] and stored[1].meta["tool_calls"]

            answer = _decide(live_asgi, session["run_id"], asked["call_id"], "approve", auth_headers)
            assert (answer.status_code, answer.json()) == (
                200, {"call_id": asked["call_id"], "status": "approved", "resumed": True})
            rest = read_rest(response)
    later, _ = parse_blocks(raw[raw.rfind("\n\n") + 2:] + rest)
    types = [f["type"] for _, f in later]
    assert "tool_result" in types and types[-1] == "done"
    ids = [i for i, _ in blocks[1:] + later if i is not None]
    assert ids == list(range(1, len(ids) + 1))  # one numbering across the pause
    assert later[-1][1]["full_text"] == "需要你确认。已经为你订好了。"
    assert len(subagent_server.requests) == 1
    assert _tool_messages(llm_settings.last_request)[0]["tool_call_id"] == asked["call_id"]

    run = wait_for(lambda: Run.objects.filter(id=session["run_id"], status=Run.Status.FINISHED).first(), what="end")
    rows = _rows(session["conversation_id"])
    assert [r.role for r in rows] == ["user", "assistant", "tool", "assistant"]
    assert rows[2].meta["ok"] is True and rows[3].content == "已经为你订好了。" and rows[3].id == run.message_id
    assert Wait.objects.get(run=run).status == Wait.Status.APPROVED


def test_reject_tells_the_model_and_never_calls_the_tool(
    live_asgi, llm_settings, agent, asking_canteen, auth_headers, subagent_server
):
    llm_settings.reply_tool_calls(("call_canteen", {"message": "订午饭"}))
    llm_settings.reply_text("好的，不订了。")
    with httpx.Client(base_url=live_asgi, timeout=15) as client:
        with client.stream("POST", "/api/v1/chat", json={"message": "订午饭"}, headers=auth_headers) as response:
            blocks, _ = read_until(response, lambda f: f["type"] == "approval_required")
            run_id, call_id = blocks[0][1]["run_id"], blocks[-1][1]["call_id"]
            assert _decide(live_asgi, run_id, call_id, "reject", auth_headers).json()["status"] == "rejected"
            rest, _ = parse_blocks(read_rest(response))
    result = next(f for _, f in rest if f["type"] == "tool_result")
    assert result["ok"] is False and result["error"] == "已拒绝，未执行。"
    assert rest[-1][1]["type"] == "done" and rest[-1][1]["full_text"] == "好的，不订了。"
    assert subagent_server.requests == []
    assert _tool_messages(llm_settings.last_request)[0]["content"].startswith(REJECTED_FOR_MODEL)


def test_an_unanswered_call_expires_as_a_rejection(
    live_asgi, llm_settings, agent, asking_canteen, auth_headers, subagent_server, settings
):
    settings.APPROVAL_TIMEOUT_SEC = 0.5
    settings.RUN_HEARTBEAT_SEC = 0.1  # the supervisor looks for expired calls every other beat
    llm_settings.reply_tool_calls(("call_canteen", {"message": "订午饭"}))
    llm_settings.reply_text("你没有确认，所以没有订。")
    result = chat(live_asgi, {"message": "订午饭"}, headers=auth_headers)
    assert [t for t in result.types if t != "chunk"][-3:] == ["approval_required", "tool_result", "done"]
    assert result.of("tool_result")[0]["error"] == "等待批准超时，未执行。"
    assert _tool_messages(llm_settings.last_request)[0]["content"].startswith(EXPIRED_FOR_MODEL)
    assert subagent_server.requests == []
    assert Wait.objects.get().status == Wait.Status.EXPIRED


def test_the_slot_is_free_while_waiting(live_asgi, llm_settings, agent, asking_canteen, auth_headers, settings):
    settings.CHAT_MAX_CONCURRENT_STREAMS = 1
    llm_settings.reply_tool_calls(("call_canteen", {"message": "订午饭"}))
    with httpx.Client(base_url=live_asgi, timeout=15) as client:
        with client.stream("POST", "/api/v1/chat", json={"message": "订午饭"}, headers=auth_headers) as response:
            read_until(response, lambda f: f["type"] == "approval_required")
            llm_settings.reply_text("另一个问题的回答")
            other = chat(live_asgi, {"message": "另一个问题"}, headers=auth_headers)  # a new conversation
            assert other.status == 200 and other.text == "另一个问题的回答"


def test_calls_of_one_round_are_decided_one_by_one_and_auto_ones_run_at_once(
    live_asgi, llm_settings, agent_factory, sub_agent_factory, auth_headers, subagent_server
):
    canteen = sub_agent_factory(name="canteen", approval_policy="ask")
    notice = sub_agent_factory(name="notice", description="通知公告：通知、公告。")
    agent_factory(sub_agents=[canteen, notice])
    llm_settings.reply_tool_calls(
        ScriptedCall("call_canteen", {"message": "订一份"}, id="c1"),
        ScriptedCall("call_notice", {"message": "最新通知"}, id="c2"),
        ScriptedCall("call_canteen", {"message": "再订一份"}, id="c3"),
    )
    llm_settings.reply_text("一份订好了，一份没订；通知也查了。")
    with httpx.Client(base_url=live_asgi, timeout=15) as client:
        with client.stream("POST", "/api/v1/chat", json={"message": "订饭并看通知"}, headers=auth_headers) as response:
            blocks, raw = read_until(response, lambda f: f["type"] == "approval_required" and "再订一份" in f["args"])
            run_id = blocks[0][1]["run_id"]
            # The calls carry our own ids (issue 20), in the model's order: c1, c2, c3.
            c1, c2, c3 = [f["call_id"] for _, f in blocks if f["type"] == "tool_call"]
            assert [f["call_id"] for _, f in blocks if f["type"] == "approval_required"] == [c1, c3]
            kinds = [(f["type"], f.get("call_id")) for _, f in blocks]
            # the auto call ran before anything was asked
            assert kinds.index(("tool_result", c2)) < kinds.index(("approval_required", c1))
            assert len(subagent_server.requests) == 1

            first = _decide(live_asgi, run_id, c1, "approve", auth_headers).json()
            assert first == {"call_id": c1, "status": "approved", "resumed": False}  # c3 still waits
            assert Run.objects.get(id=run_id).status == Run.Status.WAITING
            again = _decide(live_asgi, run_id, c1, "reject", auth_headers)
            assert again.status_code == 409 and again.json()["code"] == 40903
            assert _decide(live_asgi, run_id, c3, "reject", auth_headers).json()["resumed"] is True
            rest = read_rest(response)
    later, _ = parse_blocks(raw[raw.rfind("\n\n") + 2:] + rest)
    results = {f["call_id"]: f["ok"] for _, f in later if f["type"] == "tool_result"}
    assert results == {c1: True, c3: False} and later[-1][1]["type"] == "done"
    assert len(subagent_server.requests) == 2
    # The model's next request: one assistant message with the three calls, then their three results.
    messages = llm_settings.last_request.messages
    calls = [m for m in messages if m.get("tool_calls")]
    assert len(calls) == 1 and [c["id"] for c in calls[0]["tool_calls"]] == [c1, c2, c3]
    assert sorted(m["tool_call_id"] for m in _tool_messages(llm_settings.last_request)) == sorted([c1, c2, c3])
    rows = _rows(Run.objects.get(id=run_id).conversation_id)
    assert [r.role for r in rows] == ["user", "assistant", "tool", "tool", "tool", "assistant"]
    assert [r.meta["tool_call_id"] for r in rows[2:5]] == [c2, c1, c3]


def test_reattach_while_waiting_replays_the_question_and_follows_on(
    live_asgi, llm_settings, agent, asking_canteen, auth_headers
):
    llm_settings.reply_tool_calls(("call_canteen", {"message": "订午饭"}))
    llm_settings.reply_text("订好了。")
    blocks = _asked_then_left(live_asgi, auth_headers)
    session, asked = blocks[0][1], blocks[-1][1]  # the page was reloaded: its stream is gone
    detail = httpx.get(f"{live_asgi}/api/v1/conversations/{session['conversation_id']}", headers=auth_headers).json()
    assert detail["active_run_id"] == session["run_id"]

    follower = _Follower(live_asgi, session["run_id"], auth_headers, params={"after": 0})
    assert follower.asked()[-1][1] == asked
    assert _decide(live_asgi, session["run_id"], asked["call_id"], "approve", auth_headers).status_code == 200
    later = follower.rest()
    assert later[-1][1]["type"] == "done" and later[-1][1]["full_text"] == "订好了。"


def test_a_paused_run_with_no_log_here_announces_its_calls_from_the_database(
    live_asgi, llm_settings, agent, asking_canteen, auth_headers
):
    """What a worker that started after the pause serves (its memory holds no log of the run)."""
    llm_settings.reply_tool_calls(("call_canteen", {"message": "订午饭"}))
    llm_settings.reply_text("订好了。")
    blocks = _asked_then_left(live_asgi, auth_headers)
    session, asked = blocks[0][1], blocks[-1][1]
    run_id = uuid.UUID(session["run_id"])
    local_runs.pop(run_id)  # as after a restart of the worker: neither the run nor its log here
    run_bus().forget(run_id)

    follower = _Follower(live_asgi, session["run_id"], auth_headers)
    assert follower.asked()[-1] == (None, asked)  # rebuilt from its row: no `id:`
    assert _decide(live_asgi, session["run_id"], asked["call_id"], "approve", auth_headers).json()["resumed"]
    later = follower.rest()
    assert [f["type"] for _, f in later][-1] == "done" and later[-1][1]["full_text"] == "订好了。"
    assert later[0][0] == Run.objects.get(id=session["run_id"]).frames_seq + 1  # numbered on from the pause


def test_stop_while_waiting_ends_the_run_and_stores_the_call_as_not_run(
    live_asgi, llm_settings, agent, asking_canteen, auth_headers
):
    llm_settings.reply_tool_calls(("call_canteen", {"message": "订午饭"}), text="需要你确认。")
    with httpx.Client(base_url=live_asgi, timeout=15) as client:
        with client.stream("POST", "/api/v1/chat", json={"message": "订午饭"}, headers=auth_headers) as response:
            blocks, _ = read_until(response, lambda f: f["type"] == "approval_required")
            run_id = blocks[0][1]["run_id"]
            stopped = client.post(f"/api/v1/runs/{run_id}/stop", headers=auth_headers)
            assert (stopped.status_code, stopped.json()) == (202, {"status": "stopping"})
            rest, _ = parse_blocks(read_rest(response))
    assert rest[-1][1]["type"] == "done" and rest[-1][1].get("interrupted") is True
    # the waiting call gets its result before the end: no `tool_call` is left without one
    assert [f for _, f in rest[:-1]] == [{"type": "tool_result", "call_id": blocks[-1][1]["call_id"],
                                          "tool": blocks[-1][1]["tool"], "ok": False,
                                          "error": "回答已停止，操作没有执行。"}]
    assert [i for i, _ in rest] == list(range(rest[0][0], rest[0][0] + 2))
    run = Run.objects.get(id=run_id)
    assert run.status == Run.Status.INTERRUPTED
    rows = _rows(run.conversation_id)
    assert [r.role for r in rows] == ["user", "assistant", "tool", "assistant"]
    assert rows[2].content == "回答已停止，操作没有执行。" and rows[3].meta["interrupted"] is True
    assert Wait.objects.get(run=run).status == Wait.Status.CANCELLED
    late = _decide(live_asgi, run_id, blocks[-1][1]["call_id"], "approve", auth_headers)
    assert late.status_code == 409 and late.json()["code"] == 40903
    assert httpx.post(f"{live_asgi}/api/v1/runs/{run_id}/stop", headers=auth_headers).json() == {"status": "finished"}


def test_a_new_question_while_waiting_is_refused_until_the_run_is_stopped(
    live_asgi, llm_settings, agent, asking_canteen, auth_headers
):
    llm_settings.reply_tool_calls(("call_canteen", {"message": "订午饭"}))
    with httpx.Client(base_url=live_asgi, timeout=15) as client:
        with client.stream("POST", "/api/v1/chat", json={"message": "订午饭"}, headers=auth_headers) as response:
            blocks, _ = read_until(response, lambda f: f["type"] == "approval_required")
            session = blocks[0][1]
            ask = {"message": "算了", "conversation_id": session["conversation_id"]}
            refused = client.post("/api/v1/chat", json=ask, headers=auth_headers)
            assert (refused.status_code, refused.json()["code"]) == (409, 40905)
            assert "先停止它" in refused.json()["message"]
            assert [r.content for r in _rows(session["conversation_id"]) if r.role == "user"] == ["订午饭"]
            assert Run.objects.get(id=session["run_id"]).status == Run.Status.WAITING  # untouched
            client.post(f"/api/v1/runs/{session['run_id']}/stop", headers=auth_headers)
            rest, _ = parse_blocks(read_rest(response))
    llm_settings.reply_text("不订了，说点别的。")
    second = chat(live_asgi, ask, headers=auth_headers)
    assert second.status == 200 and second.text == "不订了，说点别的。"
    tool_messages = _tool_messages(llm_settings.last_request)  # the history has no call without a result
    assert [m["content"] for m in tool_messages] == ["回答已停止，操作没有执行。"]
    assert [r.role for r in _rows(session["conversation_id"])] == ["user", "assistant", "tool", "assistant", "user",
                                                                   "assistant"]


def test_the_approvals_endpoint_refuses_clearly(
    live_asgi, llm_settings, agent, asking_canteen, auth_headers, other_user, token_for
):
    llm_settings.reply_tool_calls(("call_canteen", {"message": "订午饭"}))
    blocks = _asked_then_left(live_asgi, auth_headers)
    run_id, call_id = blocks[0][1]["run_id"], blocks[-1][1]["call_id"]
    url = f"{live_asgi}/api/v1/runs/{run_id}/approvals"
    stranger = {"Authorization": f"Bearer {token_for(other_user)}"}

    def post(body, headers=auth_headers, **kw):
        return httpx.post(url, json=body, headers=headers, **kw) if body is not None else httpx.post(url, headers=headers, **kw)

    assert httpx.get(url, headers=auth_headers).status_code == 405
    assert post({"call_id": call_id, "decision": "approve"}, headers={}).status_code == 401
    assert post({"call_id": call_id, "decision": "approve"}, headers=stranger).status_code == 404
    for body in ({"call_id": call_id}, {"call_id": call_id, "decision": "yes"}, {"call_id": "", "decision": "approve"},
                 {"call_id": 7, "decision": "approve"}, {"call_id": "x" * 129, "decision": "approve"},
                 {"call_id": call_id, "decision": ["approve"]}):
        answer = post(body)
        assert (answer.status_code, answer.json()["code"]) == (400, 40001), body
    as_json = {**auth_headers, "Content-Type": "application/json"}
    for raw, status in ((b"{", 400), (b"[" * 1200 + b"]" * 1200, 400), (b"\xef\xbb\xbf{}", 400),
                        (b'{"call_id": "a", "call_id": "b", "decision": "approve"}', 400),
                        (b'{"call_id": "\\ud800", "decision": "approve"}', 400),
                        (b'{"call_id": "' + b"x" * 70_000 + b'", "decision": "approve"}', 413)):
        assert httpx.post(url, content=raw, headers=as_json).status_code == status, raw[:40]
    assert httpx.post(url, content=b"call_id=1", headers={**auth_headers, "Content-Type": "text/plain"}).status_code == 415
    unknown = post({"call_id": "call_nobody", "decision": "approve"})
    assert (unknown.status_code, unknown.json()["code"]) == (404, 40401)
    assert Run.objects.get(id=run_id).status == Run.Status.WAITING  # nothing decided by the refusals


def test_a_decision_after_the_deadline_is_refused_and_the_run_goes_on(
    live_asgi, llm_settings, agent, asking_canteen, auth_headers, subagent_server, settings
):
    settings.RUN_HEARTBEAT_SEC = 3600  # no supervisor pass: the late decision itself finds the expiry
    llm_settings.reply_tool_calls(("call_canteen", {"message": "订午饭"}))
    llm_settings.reply_text("没有确认，没订。")
    with httpx.Client(base_url=live_asgi, timeout=15) as client:
        with client.stream("POST", "/api/v1/chat", json={"message": "订午饭"}, headers=auth_headers) as response:
            blocks, _ = read_until(response, lambda f: f["type"] == "approval_required")
            run_id, call_id = blocks[0][1]["run_id"], blocks[-1][1]["call_id"]
            Wait.objects.filter(run_id=run_id).update(expires_at=timezone.now())  # the deadline passed
            late = _decide(live_asgi, run_id, call_id, "approve", auth_headers)
            assert (late.status_code, late.json()["code"]) == (409, 40903) and "已超时" in late.json()["message"]
            rest, _ = parse_blocks(read_rest(response))
    assert next(f for _, f in rest if f["type"] == "tool_result")["error"] == "等待批准超时，未执行。"
    assert rest[-1][1]["type"] == "done" and subagent_server.requests == []


def test_a_finished_run_has_nothing_to_approve(live_asgi, llm_settings, agent, auth_headers):
    llm_settings.reply_text("你好")
    result = chat(live_asgi, {"message": "你好"}, headers=auth_headers)
    answer = _decide(live_asgi, result.frames[0]["run_id"], "call_1", "approve", auth_headers)
    assert (answer.status_code, answer.json()["code"]) == (409, 40903)


def test_never_tools_are_not_offered_and_auto_ones_need_no_approval(
    live_asgi, llm_settings, agent_factory, sub_agent_factory, auth_headers
):
    agent_factory(sub_agents=[sub_agent_factory(name="canteen", approval_policy="never"),
                              sub_agent_factory(name="notice", description="通知公告：通知。")])
    llm_settings.reply_tool_calls(("call_notice", {"message": "通知"}))
    llm_settings.reply_text("查好了。")
    result = chat(live_asgi, {"message": "通知"}, headers=auth_headers)
    assert "approval_required" not in result.types and result.types[-1] == "done"
    assert llm_settings.requests[0].tool_names == ["call_notice"]


def test_an_mcp_tool_waits_for_approval_and_runs_once_approved(
    live_asgi, llm_settings, agent_factory, mcp_service_http, auth_headers
):
    mcp_service_http.trusted = True  # its register_course says destructiveHint: ask first
    mcp_service_http.save()
    agent_factory(mcp_services=[mcp_service_http])
    tool = f"{mcp_service_http.name}__register_course"
    llm_settings.reply_tool_calls((tool, {"course": "CS101"}))
    llm_settings.reply_text("选好了。")
    with httpx.Client(base_url=live_asgi, timeout=15) as client:
        with client.stream("POST", "/api/v1/chat", json={"message": "选 CS101"}, headers=auth_headers) as response:
            blocks, _ = read_until(response, lambda f: f["type"] == "approval_required")
            assert blocks[-1][1]["tool"] == tool
            _decide(live_asgi, blocks[0][1]["run_id"], blocks[-1][1]["call_id"], "approve", auth_headers)
            rest, _ = parse_blocks(read_rest(response))
    assert next(f for _, f in rest if f["type"] == "tool_result")["ok"] is True
    assert _tool_messages(llm_settings.last_request)[0]["content"] == "已选上 CS101"


def test_the_resumed_turn_sends_the_model_what_an_unpaused_turn_would(
    live_asgi, llm_settings, agent, asking_canteen, auth_headers, settings
):
    """The same window of history (MAX_HISTORY rows up to the question), then the round."""
    llm_settings.reply_text("第一次回答")
    first = chat(live_asgi, {"message": "第一个问题"}, headers=auth_headers)
    conversation_id = first.frames[0]["conversation_id"]
    settings.MAX_HISTORY = 1  # the question alone
    llm_settings.reply_tool_calls(("call_canteen", {"message": "订午饭"}), text="需要确认。")
    llm_settings.reply_text("订好了。")
    with httpx.Client(base_url=live_asgi, timeout=15) as client:
        with client.stream("POST", "/api/v1/chat", json={"message": "订午饭", "conversation_id": conversation_id},
                           headers=auth_headers) as response:
            blocks, _ = read_until(response, lambda f: f["type"] == "approval_required")
            _decide(live_asgi, blocks[0][1]["run_id"], blocks[-1][1]["call_id"], "approve", auth_headers)
            read_rest(response)
    before, resumed = llm_settings.requests[-2].messages, llm_settings.requests[-1].messages
    assert [m["role"] for m in before] == ["system", "user"] and before[1]["content"] == "订午饭"
    assert [m["role"] for m in resumed] == ["system", "user", "assistant", "tool"]
    assert resumed[1]["content"] == "订午饭" and resumed[2]["tool_calls"][0]["function"]["name"] == "call_canteen"


def test_a_paused_rounds_reasoning_goes_back_with_its_calls_when_the_run_resumes(
    live_asgi, llm_settings, agent, asking_canteen, auth_headers, subagent_server
):
    """The resumed turn rebuilds its messages from the stored rows: the paused round's reasoning
    (kept on its assistant row) goes back with its calls, as DeepSeek's thinking mode requires."""
    llm_settings.requires_reasoning_back = True
    llm_settings.queue(Reply(reasoning="要订饭，先问学生。", tool_calls=[ScriptedCall("call_canteen", {"message": "订午饭"})]))
    llm_settings.reply_text("已经为你订好了。")
    blocks = _asked_then_left(live_asgi, auth_headers)
    session, asked = blocks[0][1], blocks[-1][1]
    assert _decide(live_asgi, session["run_id"], asked["call_id"], "approve", auth_headers).json()["resumed"] is True
    wait_for(lambda: Run.objects.get(id=session["run_id"]).status == Run.Status.FINISHED, what="the resumed run's end")
    resumed = llm_settings.last_request.messages
    assert [m.get("reasoning_content") for m in resumed if m.get("tool_calls")] == ["要订饭，先问学生。"]
    assert _rows(session["conversation_id"])[-1].content == "已经为你订好了。"
