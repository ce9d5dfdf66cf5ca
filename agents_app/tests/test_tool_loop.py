"""The tool loop against the scripted model, the contract sub-agent and real MCP servers."""
import asyncio
import json
import re
import time
from dataclasses import replace

import pytest
from asgiref.sync import sync_to_async

from agents_app.runtime.context import RunContext
from agents_app.runtime.events import (
    Chunk,
    Done,
    Error,
    ToolCall,
    ToolChunk,
    ToolResult,
)
from agents_app.runtime.loop import (
    DOMAIN_HINT_TEXT,
    MODEL_INTERRUPTED_TEXT,
    MODEL_REFUSED_TEXT,
    NO_ANSWER_TEXT,
    TOOLS_SPENT_TEXT,
    TURN_TIMEOUT_TEXT,
    LlmUnavailable,
    run_turn,
)
from agents_app.runtime.model_calls import BAD_ARGUMENTS_NOTE
from agents_app.runtime.tool_runs import TOOL_CRASHED_TEXT, UNKNOWN_TOOL_TEXT, ToolRequest, tool_calls_run
from campus_agent.base.errors import CAMPUS_TOKEN_EXPIRED, DOWNSTREAM, SUBAGENT_INTERNAL
from subagents_app.client import (
    ERROR_EVENT_NOTICE,
    ERROR_EVENT_TEXT,
    HTTP_ERROR_NOTICE,
    HTTP_ERROR_TEXT,
    TOKEN_EXPIRED_NOTICE,
    subagent_client_close,
)
from testkit.model.fake_llm import Reply, ScriptedCall
from testkit.subagents.contract_agent import CHART, ERROR_MESSAGE, EXPIRED_MESSAGE, answer_chunks

pytestmark = pytest.mark.django_db(transaction=True)

CTX = RunContext(request_id="0123456789abcdef", conversation_id="conv-42", user_id=1,
                 campus_token="campus-secret-token-0001")
HISTORY = [{"role": "user", "content": "今天中午吃啥"}]


async def collect(agent, history=HISTORY, ctx=CTX):
    return [event async for event in run_turn(agent=agent, history=history, ctx=ctx)]


@pytest.fixture(autouse=True)
async def _close_shared_clients(mcp_pool_cleanup):
    yield
    await subagent_client_close()


async def test_plain_answer_streams_and_prepends_system_prompt(llm_settings, agent):
    llm_settings.reply_text("你好，我是校园小智。")
    events = await collect(agent)
    assert "".join(e.content for e in events if isinstance(e, Chunk)) == "你好，我是校园小智。"
    assert sum(isinstance(e, Chunk) for e in events) >= 3
    done = events[-1]
    assert isinstance(done, Done) and done.full_text == "你好，我是校园小智。" and not done.interrupted
    assert done.usage["completion_tokens"] == len("你好，我是校园小智。")
    sent = llm_settings.requests[0]
    assert sent.messages == [{"role": "system", "content": agent.system_prompt}, *HISTORY]
    assert sent.tool_names == ["call_canteen"]
    assert sent.body["tool_choice"] == "auto"


async def test_sub_agent_call_streams_live_and_the_result_goes_back_to_the_model(llm_settings, agent, subagent_server):
    llm_settings.reply_tool_calls(ScriptedCall("call_canteen", {"message": "今天吃啥"}, id="call_1"), text="我查一下。")
    llm_settings.reply_text("一食堂今天有红烧肉。")
    events = await collect(agent)
    kinds = [type(e).__name__ for e in events]
    assert kinds.index("ToolCall") < kinds.index("ToolChunk") < kinds.index("ToolResult") < kinds.index("Done")
    assert [e.content for e in events if isinstance(e, ToolChunk)] == answer_chunks("今天吃啥")
    result = next(e for e in events if isinstance(e, ToolResult))
    assert result.ok and result.content == "".join(answer_chunks("今天吃啥"))
    done = events[-1]
    assert done.full_text == "我查一下。一食堂今天有红烧肉。" and done.chart == CHART
    second = llm_settings.requests[1].messages
    # Our id, not the model's "call_1", in what goes back to the model (and is stored).
    assert re.fullmatch(r"call_[0-9a-f]{16}", result.call_id)
    assert second[-2] == {"role": "assistant", "content": "我查一下。", "tool_calls": [
        {"id": result.call_id, "type": "function", "function": {"name": "call_canteen",
                                                                 "arguments": '{"message": "今天吃啥"}'}}]}
    assert second[-1] == {"role": "tool", "tool_call_id": result.call_id, "content": result.content}
    # The campus token goes to the sub-agent only, never to the model.
    assert subagent_server.last_request.headers["authorization"] == f"Bearer {CTX.campus_token}"
    for request in llm_settings.requests:
        assert CTX.campus_token not in json.dumps(request.body, ensure_ascii=False)
        assert CTX.campus_token not in json.dumps(request.headers)
    assert subagent_server.last_request.headers["x-request-id"] == CTX.request_id
    assert subagent_server.last_request.headers["x-parent-conversation-id"] == CTX.conversation_id


async def test_several_calls_run_concurrently_and_tool_messages_keep_call_order(
    llm_settings, agent_factory, sub_agent_factory, subagent_server
):
    slow = await sync_to_async(sub_agent_factory)(name="notice", description="通知公告")
    fast = await sync_to_async(sub_agent_factory)(name="canteen")
    agent = await sync_to_async(agent_factory)(sub_agents=[slow, fast])
    llm_settings.queue(Reply(interleave=True, tool_calls=[
        ScriptedCall("call_notice", {"message": "[[mode:held]] 通知"}, id="a"),
        ScriptedCall("call_canteen", {"message": "吃啥"}, id="b"),
    ]))
    llm_settings.reply_text("好的")
    # The notice sub-agent holds its answer after its first chunk until released: released only
    # once canteen's result and that first chunk have both come, each on its own (events, not time).
    events, released_while_held = [], False
    try:
        async for event in run_turn(agent=agent, history=HISTORY, ctx=CTX):
            events.append(event)
            results = [e for e in events if isinstance(e, ToolResult)]
            if not subagent_server.release.is_set() and results and any(
                    isinstance(e, ToolChunk) and e.call_id != results[0].call_id for e in events):
                held = [e for e in events if isinstance(e, ToolCall) and e.tool == "call_notice"]
                released_while_held = not any(r.call_id == held[0].call_id for r in results)
                subagent_server.release.set()
    finally:
        subagent_server.release.set()
    assert released_while_held  # canteen's result and the held call's first chunk came while it was held
    results = [e for e in events if isinstance(e, ToolResult)]
    # canteen finished while notice was still answering: concurrent, and reported as each ends.
    assert [r.tool for r in results] == ["call_canteen", "call_notice"]
    assert results[1].ok and results[1].content == "".join(answer_chunks("通知"))
    # Events carry our own call ids, not the model's (issue 20).
    assert all(re.fullmatch(r"call_[0-9a-f]{16}", r.call_id) for r in results)
    # The held call's text was forwarded live, while that tool was still running (above), in order.
    streamed = [e.content for e in events if isinstance(e, ToolChunk) and e.call_id == results[1].call_id]
    assert streamed == answer_chunks("通知")
    # The model reads its calls back under our ids (call order), each tool message paired with its call.
    notice_id, canteen_id = results[1].call_id, results[0].call_id
    tool_messages = [m for m in llm_settings.requests[1].messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == [notice_id, canteen_id]
    [assistant] = [m for m in llm_settings.requests[1].messages if m.get("tool_calls")]
    assert [c["id"] for c in assistant["tool_calls"]] == [notice_id, canteen_id]


async def test_arguments_that_are_not_an_object_become_empty_and_the_model_is_told(
    llm_settings, agent_factory, mcp_service_stdio
):
    agent = await sync_to_async(agent_factory)(mcp_services=[mcp_service_stdio])
    llm_settings.reply_tool_calls(("tools__pid", "not json"), ("tools__pid", "[1, 2]"))
    llm_settings.reply_text("好")
    events = await collect(agent)
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert [c.args for c in calls] == ["{}", "{}"]
    tool_messages = [m for m in llm_settings.requests[1].messages if m["role"] == "tool"]
    assert all(m["content"].startswith(BAD_ARGUMENTS_NOTE) for m in tool_messages)
    assistant = llm_settings.requests[1].messages[-3]
    assert [c["function"]["arguments"] for c in assistant["tool_calls"]] == ["{}", "{}"]


async def test_unknown_tool_becomes_a_result_the_model_reads(llm_settings, agent):
    llm_settings.reply_tool_calls(ScriptedCall("no_such_tool", {}, id="x"))
    llm_settings.reply_text("抱歉")
    events = await collect(agent)
    result = next(e for e in events if isinstance(e, ToolResult))
    assert not result.ok and result.content == UNKNOWN_TOOL_TEXT.format(name="no_such_tool")
    assert llm_settings.requests[1].messages[-1]["content"] == result.content
    assert events[-1].full_text == "抱歉"


class ExplodingTool:
    """A tool whose run raises: the loop must turn that into a result, not a dead turn."""

    name, description, parameters = "explode", "raises", {"type": "object", "properties": {}}

    async def run(self, args, ctx, emit):
        await emit("准备中")
        raise RuntimeError("boom")


async def test_a_tool_that_raises_becomes_a_failed_result():
    deadline = asyncio.get_running_loop().time() + 5
    runs = tool_calls_run(calls=[ToolRequest(call_id="c1", tool="explode", args={})],
                          tools_by_name={"explode": ExplodingTool()}, ctx=CTX, deadline=deadline)
    chunk, result = [event async for event in runs]
    assert chunk == ToolChunk(call_id="c1", tool="explode", content="准备中")
    assert not result.ok and result.content == TOOL_CRASHED_TEXT.format(reason="RuntimeError: boom")
    assert result.error == TOOL_CRASHED_TEXT.format(reason="RuntimeError")  # what the user sees


async def test_sub_agent_description_changed_in_db_reaches_the_model_next_turn(llm_settings, agent, sub_agent):
    llm_settings.reply_text("一")
    llm_settings.reply_text("二")
    await collect(agent)
    sub_agent.description = "食堂助手（新）：食堂、夜宵、外卖。"
    await sync_to_async(sub_agent.save)()
    await collect(agent)
    first, second = (r.tools[0]["function"]["description"] for r in llm_settings.requests)
    assert first.startswith("食堂助手：") and second == "食堂助手（新）：食堂、夜宵、外卖。"


async def test_disabled_sub_agent_is_not_offered_next_turn(llm_settings, agent, sub_agent):
    llm_settings.reply_text("一")
    llm_settings.reply_text("二")
    await collect(agent)
    sub_agent.enabled = False
    await sync_to_async(sub_agent.save)()
    await collect(agent)
    assert [r.tool_names for r in llm_settings.requests] == [["call_canteen"], []]
    assert "tools" not in llm_settings.requests[1].body


async def test_max_tool_rounds_then_one_last_request_without_tools(llm_settings, agent_factory, sub_agent):
    agent = await sync_to_async(agent_factory)(sub_agents=[sub_agent], max_tool_rounds=2)
    llm_settings.responder = lambda req: (
        Reply(tool_calls=[ScriptedCall("call_canteen", {"message": "再查"})]) if req.tools else "只能直接回答了。"
    )
    events = await collect(agent)
    assert len(llm_settings.requests) == 3
    assert [bool(r.tools) for r in llm_settings.requests] == [True, True, False]
    assert sum(isinstance(e, ToolCall) for e in events) == 2
    assert events[-1].full_text == "只能直接回答了。"


@pytest.mark.parametrize("text", ["", "   "])
async def test_a_model_that_still_calls_tools_after_the_last_round_gives_a_marked_end(
    llm_settings, agent_factory, sub_agent, text
):
    agent = await sync_to_async(agent_factory)(sub_agents=[sub_agent], max_tool_rounds=1)
    llm_settings.responder = lambda req: Reply(text=text, tool_calls=[ScriptedCall("call_canteen", {"message": "再查"})])
    events = await collect(agent)
    assert [bool(r.tools) for r in llm_settings.requests] == [True, False]
    assert sum(isinstance(e, ToolCall) for e in events) == 1  # the call asked for without tools is not run
    assert [e for e in events if isinstance(e, Error)] == [Error(DOWNSTREAM, TOOLS_SPENT_TEXT)]
    assert events[-1].interrupted is True


async def test_an_empty_answer_is_marked_not_stored_as_one(llm_settings, agent):
    llm_settings.reply_text("")
    events = await collect(agent)
    assert [e for e in events if isinstance(e, Error)] == [Error(DOWNSTREAM, NO_ANSWER_TEXT)]
    assert isinstance(events[-1], Done) and events[-1].interrupted is True


@pytest.mark.parametrize(
    ("mode", "for_model", "for_student"),
    [
        ("http500", HTTP_ERROR_TEXT.format(status=500), HTTP_ERROR_NOTICE.format(label="食堂助手")),
        ("error", ERROR_EVENT_TEXT.format(message=ERROR_MESSAGE), ERROR_EVENT_NOTICE.format(label="食堂助手")),
    ],
)
async def test_sub_agent_failures_are_surfaced_with_their_code(llm_settings, agent, mode, for_model, for_student):
    llm_settings.reply_tool_calls(("call_canteen", {"message": f"[[mode:{mode}]]"}))
    llm_settings.reply_text("子服务出错了。")
    events = await collect(agent)
    assert [e for e in events if isinstance(e, Error)] == [Error(SUBAGENT_INTERNAL, for_student)]
    result = next(e for e in events if isinstance(e, ToolResult))
    assert (result.ok, result.content, result.error) == (False, for_model, for_student)
    assert llm_settings.requests[1].messages[-1]["content"] == for_model  # the model reads the reason
    assert isinstance(events[-1], Done) and not events[-1].interrupted  # the model still answers


async def test_expired_campus_token_is_surfaced_with_its_code(llm_settings, agent):
    llm_settings.reply_tool_calls(("call_canteen", {"message": "[[mode:expired]]"}))
    llm_settings.reply_text("请重新登录。")
    events = await collect(agent)
    errors = [e for e in events if isinstance(e, Error)]
    assert errors == [Error(CAMPUS_TOKEN_EXPIRED, TOKEN_EXPIRED_NOTICE)]
    result = next(e for e in events if isinstance(e, ToolResult))
    assert result.content == ERROR_EVENT_TEXT.format(message=EXPIRED_MESSAGE)
    assert isinstance(events[-1], Done)


@pytest.mark.parametrize("fault", [Reply(status=500), Reply(status=429), Reply(stall_sec=5),
                                   Reply(text="好", error_after_chunks=0)])
async def test_model_failing_before_any_event_raises_llm_unavailable(llm_settings, agent, settings, fault):
    settings.LLM_TIMEOUT = 1.0
    llm_settings.queue(fault)
    started = time.perf_counter()
    with pytest.raises(LlmUnavailable):
        await collect(agent)
    assert time.perf_counter() - started < 3


async def test_domain_hint_follows_the_system_prompt(llm_settings, agent):
    llm_settings.reply_text("好的。")
    await collect(agent, ctx=replace(CTX, hint_domain="canteen"))
    [system, *rest] = llm_settings.requests[0].messages
    assert system == {"role": "system", "content": agent.system_prompt + "\n\n" + DOMAIN_HINT_TEXT.format(domain='"canteen"')}
    assert rest == HISTORY


@pytest.mark.parametrize("status", [400, 401, 404])
async def test_model_refusing_the_request_is_reported_not_routed_around(llm_settings, agent, status):
    llm_settings.queue(Reply(status=status))
    events = await collect(agent)  # no LlmUnavailable: keyword routing would hide a bad key or model
    assert events[-2] == Error(DOWNSTREAM, MODEL_REFUSED_TEXT.format(status=status))
    assert isinstance(events[-1], Done) and events[-1].interrupted


async def test_unconfigured_model_raises_llm_unavailable(settings, agent):
    settings.LLM_BASE_URL = ""
    with pytest.raises(LlmUnavailable):
        await collect(agent)


async def test_model_failing_after_tool_calls_ends_with_error_and_interrupted_done(llm_settings, agent, settings):
    settings.LLM_TIMEOUT = 1.0
    llm_settings.reply_tool_calls(("call_canteen", {"message": "吃啥"}))
    llm_settings.fail(500)
    events = await collect(agent)
    assert events[-2] == Error(DOWNSTREAM, MODEL_INTERRUPTED_TEXT)
    assert isinstance(events[-1], Done) and events[-1].interrupted


# The first chunk only carries the role, so 3 chunks = two pieces of 2 characters.
@pytest.mark.parametrize("fault", [{"hang_after_chunks": 3}, {"error_after_chunks": 3}, {"drop_after_chunks": 3}])
async def test_stream_failing_mid_answer_keeps_partial_text(llm_settings, agent, settings, fault):
    settings.LLM_TIMEOUT = 1.0
    llm_settings.queue(Reply(text="今天食堂有红烧肉和青菜", chunk_size=2, **fault))
    events = await collect(agent)
    done = events[-1]
    assert done.interrupted and done.full_text == "今天食堂"
    assert events[-2] == Error(DOWNSTREAM, MODEL_INTERRUPTED_TEXT)


async def test_llm_request_carries_request_id_limits_and_usage_option(llm_settings, agent, settings):
    settings.LLM_MAX_TOKENS = 321
    llm_settings.reply_text("好")
    await collect(agent)
    sent = llm_settings.requests[0]
    assert sent.headers["x-request-id"] == CTX.request_id
    assert sent.headers["authorization"] == "Bearer sk-test-0123456789abcdef"
    assert sent.body["max_tokens"] == 321 and sent.body["stream"] is True
    assert sent.body["stream_options"] == {"include_usage": True}
    assert sent.body["model"] == "fake-model" and sent.body["temperature"] == agent.temperature


async def test_turn_budget_ends_a_turn_whose_tools_run_too_long(llm_settings, agent, settings):
    settings.TURN_BUDGET_SEC = 1.0
    llm_settings.reply_tool_calls(("call_canteen", {"message": "[[mode:trickle]]"}))
    started = time.perf_counter()
    events = await collect(agent)
    assert time.perf_counter() - started < 1 + 1
    assert events[-2] == Error(DOWNSTREAM, TURN_TIMEOUT_TEXT)
    assert isinstance(events[-1], Done) and events[-1].interrupted
    assert len(llm_settings.requests) == 1
