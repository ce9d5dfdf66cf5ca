"""A turn whose MCP server asks the student something (an elicitation, issue 23 point 3), at the
runtime's level, against the SDK-built test server over streamable-http, in both protocol eras
(the handshake era asks within the call; 2026-07-28 answers the call with an InputRequiredResult
and takes the answer on the retry).

The student is not at hand mid-call: the server hears "cancel", the turn pauses with an
`ElicitationRequired`, and once the student answered, the resumed turn runs the call again and
hands the server that answer (agents_app/mcp/person.py TurnPerson). The pause and the answer
endpoint over HTTP are chat_app/tests/runs/test_elicitation_turns.py."""
import json

import pytest
from asgiref.sync import sync_to_async

from agents_app.mcp.person import MAX_QUESTIONS_PER_CALL, TurnPerson
from agents_app.runtime.context import RunContext
from agents_app.runtime.events import Done, ElicitationRequired, Paused, ToolCall, ToolResult
from agents_app.runtime.loop import NOT_ANSWERED_TEXT, DecidedCall, resume_turn, run_turn
from testkit.mcp.servers import ENROL_MESSAGE, PAY_MESSAGE, PAY_URL

pytestmark = pytest.mark.django_db(transaction=True)

CTX = RunContext(request_id="0a1b2c3d4e5f6789", conversation_id="conv-elicit")
QUESTION = [{"role": "user", "content": "帮我选课"}]


@pytest.fixture(autouse=True)
def _pool(mcp_pool_cleanup):
    return mcp_pool_cleanup


@pytest.fixture(params=["default", "handshake"])
def era(request, monkeypatch):
    if request.param == "handshake":
        from agents_app.tests.test_mcp_notifications import _handshake_era

        _handshake_era(monkeypatch)
    return request.param


@pytest.fixture
async def agent(agent_factory, mcp_service_http):
    return await sync_to_async(agent_factory)(mcp_services=[mcp_service_http])


async def _events(stream) -> list:
    return [e async for e in stream]


async def _asked(agent, llm, tool: str) -> tuple[ToolCall, ElicitationRequired, list]:
    """A turn in which the model calls `tool`: it pauses on the server's question."""
    llm.reply_tool_calls((f"http-tools__{tool}", {}))
    events = await _events(run_turn(agent=agent, history=QUESTION, ctx=CTX))
    assert isinstance(events[-1], Paused) and not any(isinstance(e, (Done, ToolResult)) for e in events)
    [call] = [e for e in events if isinstance(e, ToolCall)]
    [asked] = events[-1].waiting
    assert isinstance(asked, ElicitationRequired) and asked.call_id == call.call_id
    return call, asked, events


def _history(call: ToolCall) -> list[dict]:
    """What chat_app stores at the pause: the question and the assistant row with the call."""
    return [*QUESTION, {"role": "assistant", "content": None, "tool_calls": [
        {"id": call.call_id, "type": "function", "function": {"name": call.tool, "arguments": call.args}}]}]


async def _resumed(agent, call: ToolCall, paused: Paused, *answers: dict, decision="approved") -> list:
    decided = [DecidedCall(call_id=call.call_id, tool=call.tool, args=call.args, decision=decision,
                           kind="elicitation", answers=answers)]
    return await _events(resume_turn(agent=agent, history=_history(call), ctx=CTX, state=paused.state, decided=decided))


async def test_a_form_waits_for_the_student_and_its_answer_reaches_the_server(agent, llm_settings, mcp_http_server,
                                                                             era):
    call, asked, events = await _asked(agent, llm_settings, "enrol")
    assert (asked.mode, asked.message, asked.service) == ("form", ENROL_MESSAGE, "http-tools")
    assert set(asked.schema["properties"]) == {"email", "credits", "campus", "notify", "note"}
    assert asked.schema["properties"]["email"]["format"] == "email"
    assert asked.defaults == {"credits": 3, "campus": "西区", "notify": True, "note": ""}  # SEP-1034
    frame = asked.frame()
    assert frame["type"] == "elicitation_required" and frame["schema"] == asked.schema and "url" not in frame
    # Until the student answers, the server has heard "cancel" (its call ended; it runs again).
    assert mcp_http_server.elicitations == [{"tool": "enrol", "action": "cancel", "content": None}]

    content = {"email": "alice@example.edu.cn", "credits": 4, "campus": "东区", "notify": False, "note": ""}
    llm_settings.reply_text("已为你选课。")
    events = await _resumed(agent, call, events[-1], {"action": "accept", "content": content})
    [result] = [e for e in events if isinstance(e, ToolResult)]
    assert json.loads(result.content) == {"action": "accept", "content": content}
    assert not any(isinstance(e, ToolCall) for e in events)  # the call was announced before the pause
    assert events[-1].full_text == "已为你选课。"
    assert mcp_http_server.elicitations[-1] == {"tool": "enrol", "action": "accept", "content": content}
    # The model reads the call's real result, after the stored assistant row.
    sent = llm_settings.requests[-1].body["messages"]
    assert sent[-1] == {"role": "tool", "tool_call_id": call.call_id, "content": result.content}


async def test_a_decline_is_the_servers_to_hear(agent, llm_settings, mcp_http_server, era):
    call, _, events = await _asked(agent, llm_settings, "enrol")
    llm_settings.reply_text("好的，不选了。")
    events = await _resumed(agent, call, events[-1], {"action": "decline"}, decision="rejected")
    [result] = [e for e in events if isinstance(e, ToolResult)]
    assert json.loads(result.content) == {"action": "decline", "content": None}
    assert [e["action"] for e in mcp_http_server.elicitations] == ["cancel", "decline"]


async def test_an_unanswered_question_is_not_run_again(agent, llm_settings, mcp_http_server, era):
    call, _, events = await _asked(agent, llm_settings, "enrol")
    llm_settings.reply_text("超时了。")
    events = await _resumed(agent, call, events[-1], decision="expired")
    [result] = [e for e in events if isinstance(e, ToolResult)]
    assert (result.ok, result.content, result.error) == (False, *NOT_ANSWERED_TEXT["expired"])
    assert [e["action"] for e in mcp_http_server.elicitations] == ["cancel"]  # what it heard stands


async def test_a_second_question_pauses_the_resumed_round_again(agent, llm_settings, mcp_http_server, era):
    call, first, events = await _asked(agent, llm_settings, "confirm_twice")
    assert first.message == "第一次确认"
    again = await _resumed(agent, call, events[-1], {"action": "accept", "content": {"confirmed": True}})
    assert isinstance(again[-1], Paused) and not any(isinstance(e, ToolResult) for e in again)
    [second] = again[-1].waiting
    assert (second.call_id, second.message) == (call.call_id, "第二次确认")

    llm_settings.reply_text("两次都问过了。")
    events = await _resumed(agent, call, again[-1], {"action": "accept", "content": {"confirmed": True}},
                            {"action": "decline"})
    [result] = [e for e in events if isinstance(e, ToolResult)]
    assert result.content == "first=accept second=decline"
    # Each run of the call: the questions not answered yet heard "cancel".
    assert [(e["first"], e["second"]) for e in mcp_http_server.elicitations] == [
        ("cancel", "cancel"), ("accept", "cancel"), ("accept", "decline")]


async def test_a_page_to_visit_waits_as_a_url_question(agent, llm_settings, mcp_http_server, era):
    call, asked, events = await _asked(agent, llm_settings, "pay")
    assert (asked.mode, asked.message, asked.url, asked.schema) == ("url", PAY_MESSAGE, PAY_URL, {})
    assert asked.frame()["url"] == PAY_URL and "schema" not in asked.frame()
    llm_settings.reply_text("缴费完成。")
    events = await _resumed(agent, call, events[-1], {"action": "accept"})
    [result] = [e for e in events if isinstance(e, ToolResult)]
    assert result.content == "pay=accept"
    assert [e["action"] for e in mcp_http_server.elicitations] == ["cancel", "accept"]


async def test_the_turns_person_caps_what_one_call_may_ask():
    import mcp_types as types

    form = types.ElicitRequestFormParams(message="q", requested_schema={"type": "object", "properties": {}})
    person = TurnPerson(answers=({"action": "accept", "content": {}},))
    first = await person.elicit(form)
    assert (first.action, person.asked) == ("accept", None)  # the stored answer, in order
    assert (await person.elicit(form)).action == "cancel" and person.asked is form
    for _ in range(MAX_QUESTIONS_PER_CALL + 2):
        assert (await person.elicit(form)).action == "cancel"
    huge = types.ElicitRequestFormParams(message="q", requested_schema={
        "type": "object", "properties": {f"f{i}": {"type": "string", "description": "x" * 100} for i in range(400)}})
    assert (await TurnPerson().elicit(huge)).action == "decline"
    script = types.ElicitRequestURLParams(message="q", url="javascript:alert(1)", elicitation_id="x")
    shy = TurnPerson()
    assert (await shy.elicit(script)).action == "decline" and shy.asked is None


# --- an A2A sub-agent's question (input-required) the student never answered ----------------

async def test_an_a2a_question_left_unanswered_cancels_the_agents_task(agent_factory, a2a_sub_agent_factory,
                                                                       a2a_server, llm_settings):
    from testkit.subagents.a2a_agent import INPUT_QUESTION

    library = await sync_to_async(lambda: agent_factory(sub_agents=[a2a_sub_agent_factory("stream", timeout_sec=10)]))()
    llm_settings.reply_tool_calls(("call_library", {"message": "[[mode:input]] 图书馆几点关门"}))
    events = await _events(run_turn(agent=library, history=QUESTION, ctx=CTX))
    [asked] = events[-1].waiting
    assert asked.message == INPUT_QUESTION and asked.resume["task_id"]
    [call] = [e for e in events if isinstance(e, ToolCall)]

    # Its time ran out: the pause hands the call a cancel with the task (chat_app's _answers).
    llm_settings.reply_text("没有等到回答。")
    events = await _resumed(library, call, events[-1], {"action": "cancel", "resume": asked.resume},
                            decision="expired")
    [result] = [e for e in events if isinstance(e, ToolResult)]
    assert result.ok is False and "任务已取消" in result.content
    assert a2a_server.cancelled.is_set() and a2a_server.cancelled_tasks == [asked.resume["task_id"]]
    assert a2a_server.continued == []
