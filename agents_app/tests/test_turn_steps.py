"""The whole event sequence of a turn, for each way a turn can go (issue 11: the loop became
steps; chat_app stores and streams exactly these events in exactly this order)."""
import asyncio

import pytest
from asgiref.sync import sync_to_async

from agents_app.runtime.context import RunContext
from agents_app.runtime.events import Chunk, Done, Error, ToolCall, ToolChunk, ToolResult
from agents_app.runtime.loop import LlmUnavailable, run_turn
from agents_app.runtime.turn import turn_stream
from subagents_app.client import subagent_client_close
from testkit.model.fake_llm import Reply, ScriptedCall
from testkit.subagents.contract_agent import answer_chunks

pytestmark = pytest.mark.django_db(transaction=True)

CTX = RunContext(request_id="0123456789abcdef", conversation_id="conv-9", campus_token="campus-secret-token-0003")
ASK = "今天吃啥"
LIVE = ["tool_chunk"] * len(answer_chunks(ASK))  # the contract sub-agent's answer, streamed live


def sign(event) -> str:
    """A short signature of an event: its kind and what tells it apart."""
    match event:
        case Chunk(content=content):
            return f"chunk:{content}"
        case ToolCall(tool=tool, args=args):
            return f"tool_call:{tool}:{args}"
        case ToolChunk():
            return "tool_chunk"
        case ToolResult(ok=ok):
            return f"tool_result:{'ok' if ok else 'failed'}"
        case Error(code=code):
            return f"error:{code}"
        case Done(interrupted=interrupted, full_text=text):
            return f"done:{'interrupted' if interrupted else 'complete'}:{text}"


async def turn(agent) -> list[str]:
    try:
        return [sign(e) async for e in run_turn(agent=agent, history=[{"role": "user", "content": ASK}], ctx=CTX)]
    finally:
        await subagent_client_close()


def call(message: str = ASK) -> ScriptedCall:
    return ScriptedCall("call_canteen", {"message": message}, id="call_1")


async def test_answer_without_tools(llm_settings, agent):
    llm_settings.reply_text("你好呀", chunk_size=2)
    assert await turn(agent) == ["chunk:你好", "chunk:呀", "done:complete:你好呀"]


async def test_text_then_a_tool_round_then_the_answer(llm_settings, agent, subagent_server):
    llm_settings.reply_tool_calls(call(), text="我查", chunk_size=2)
    llm_settings.reply_text("有肉", chunk_size=2)
    assert await turn(agent) == ["chunk:我查", 'tool_call:call_canteen:{"message": "今天吃啥"}', *LIVE,
                                 "tool_result:ok", "chunk:有肉", "done:complete:我查有肉"]


async def test_max_tool_rounds_ends_with_a_request_without_tools(llm_settings, agent_factory, sub_agent,
                                                                 subagent_server):
    agent = await sync_to_async(agent_factory)(sub_agents=[sub_agent], max_tool_rounds=1)
    llm_settings.reply_tool_calls(call())
    llm_settings.reply_tool_calls(call())  # offered no tools, the model asks anyway: not run, and no answer
    assert await turn(agent) == ['tool_call:call_canteen:{"message": "今天吃啥"}', *LIVE, "tool_result:ok",
                                 "error:50003", "done:interrupted:"]
    assert [bool(r.tools) for r in llm_settings.requests] == [True, False]


async def test_an_expired_campus_token_is_an_error_and_the_model_still_answers(llm_settings, agent, subagent_server):
    llm_settings.reply_tool_calls(call("[[mode:expired]]"))
    llm_settings.reply_text("请重新登录", chunk_size=8)
    events = await turn(agent)
    assert events[0].startswith("tool_call:") and events[-3:] == ["error:40102", "chunk:请重新登录",
                                                                   "done:complete:请重新登录"]
    assert events[-4] == "tool_result:failed"


async def test_the_model_refusing_the_request(llm_settings, agent):
    llm_settings.fail(401)
    assert await turn(agent) == ["error:50003", "done:interrupted:"]


async def test_the_model_failing_mid_answer(llm_settings, agent):
    llm_settings.queue(Reply(text="今天食堂有肉", chunk_size=2, error_after_chunks=3))
    assert await turn(agent) == ["chunk:今天", "chunk:食堂", "error:50003", "done:interrupted:今天食堂"]


async def test_the_model_failing_after_a_tool_round(llm_settings, agent, subagent_server):
    llm_settings.reply_tool_calls(call())
    llm_settings.fail(500)
    assert await turn(agent) == ['tool_call:call_canteen:{"message": "今天吃啥"}', *LIVE, "tool_result:ok",
                                 "error:50003", "done:interrupted:"]


async def test_the_turn_budget_running_out_while_a_tool_runs(llm_settings, agent, settings, subagent_server):
    settings.TURN_BUDGET_SEC = 0.5
    llm_settings.reply_tool_calls(call("[[mode:trickle]]"), text="稍等", chunk_size=2)
    events = await turn(agent)
    assert events[:2] == ["chunk:稍等", 'tool_call:call_canteen:{"message": "[[mode:trickle]]"}']
    assert set(events[2:-2]) <= {"tool_chunk"}
    assert events[-2:] == ["error:50003", "done:interrupted:稍等"]


async def test_the_first_request_failing_raises_for_the_fallback(llm_settings, agent):
    llm_settings.fail(503)
    with pytest.raises(LlmUnavailable):
        await turn(agent)


def _tool_tasks() -> list[asyncio.Task]:
    return [t for t in asyncio.all_tasks() if t.get_coro().__qualname__.endswith("tool_calls_run.<locals>.run_one")]


async def test_closing_the_turn_cancels_its_running_tool_at_once(llm_settings, agent, subagent_server):
    # chat_app closes the turn's events when a run is stopped or fails; the tool must stop then,
    # not whenever the garbage collector finalizes a generator left open.
    llm_settings.reply_tool_calls(call("[[mode:trickle]]"))
    events = turn_stream(agent=agent, history=[{"role": "user", "content": ASK}], ctx=CTX)
    try:
        async for event in events:
            if isinstance(event, ToolChunk):
                break
        [running] = _tool_tasks()
        await events.aclose()
        assert running.cancelling() or running.done()
    finally:
        await subagent_client_close()
