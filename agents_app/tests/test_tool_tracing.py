"""Tool spans (agents_app/runtime/tracing.py) over each MCP transport, and what a tool span
records when the tool fails, is unknown or is cancelled."""
import asyncio
import json

import pytest
from asgiref.sync import sync_to_async

from agents_app.mcp.connect import REQUEST_ID_META_KEY
from agents_app.models import McpService
from agents_app.runtime.context import RunContext
from agents_app.runtime.events import ToolChunk, ToolResult
from agents_app.runtime.loop import run_turn
from agents_app.runtime.tool_runs import UNKNOWN_TOOL_TEXT

pytestmark = pytest.mark.django_db(transaction=True)

CTX = RunContext(request_id="5f0c6a1e2b3d4c7a", conversation_id="conv-9")


@pytest.fixture(autouse=True)
def _pool(mcp_pool_cleanup):
    return mcp_pool_cleanup


def _traceparent(span) -> str:
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


async def _events(agent, *, ctx=CTX):
    return [e async for e in run_turn(agent=agent, history=[{"role": "user", "content": "查一下"}], ctx=ctx)]


async def test_mcp_server_gets_the_trace_context_of_the_call_over_each_transport(
    any_mcp_service, agent_factory, llm_settings, spans
):
    agent = await sync_to_async(agent_factory)(mcp_services=[any_mcp_service])
    tool = f"{any_mcp_service.name}__request_info"
    llm_settings.reply_tool_calls((tool, {}))
    llm_settings.reply_text("好的")
    [result] = [e for e in await _events(agent) if isinstance(e, ToolResult)]
    seen = json.loads(result.content)

    [span] = spans.named(f"execute_tool {tool}")
    assert span.attributes["campus.tool.kind"] == "mcp" and span.attributes["campus.request_id"] == CTX.request_id
    # The SDK's client span of the call is the tool span's child; the server got its context.
    [sent] = [s for s in spans.named("MCP send tools/call") if s.parent and s.parent.span_id == span.context.span_id]
    assert seen["meta"]["traceparent"] == _traceparent(sent)
    assert seen["meta"][REQUEST_ID_META_KEY] == CTX.request_id
    if any_mcp_service.protocol != McpService.Protocol.STDIO:
        assert seen["headers"] == {"x-request-id": CTX.request_id, "traceparent": _traceparent(sent)}


async def test_unknown_tool_is_a_failed_span(agent, llm_settings, spans):
    llm_settings.reply_tool_calls(("no_such_tool", {}))
    llm_settings.reply_text("好的")
    [result] = [e for e in await _events(agent) if isinstance(e, ToolResult)]
    assert result.content == UNKNOWN_TOOL_TEXT.format(name="no_such_tool")
    [span] = spans.named("execute_tool no_such_tool")
    assert span.attributes["campus.tool.kind"] == "unknown"
    assert (span.attributes["campus.tool.ok"], span.attributes["error.type"]) == (False, "tool_error")
    assert span.status.status_code.name == "ERROR"


async def test_a_tool_stopped_mid_call_is_marked_cancelled(agent, llm_settings, spans):
    llm_settings.reply_tool_calls(("call_canteen", {"message": "[[mode:trickle]]"}))
    events = run_turn(agent=agent, history=[{"role": "user", "content": "等等"}], ctx=CTX)
    async for event in events:
        if isinstance(event, ToolChunk):  # the sub-agent is streaming: the tool is mid-call
            break
    await events.aclose()  # the client went away: the running tool is cancelled
    [span] = await asyncio.to_thread(spans.wait_for, "execute_tool call_canteen")
    assert span.attributes["campus.cancelled"] is True
    assert "campus.tool.ok" not in span.attributes
    [round_span] = spans.named("chat ")
    assert round_span.attributes["campus.tool_calls"] == 1


async def test_model_down_marks_the_round(agent_factory, llm_settings, spans, settings):
    settings.KEYWORD_FALLBACK_ENABLED = False
    agent = await sync_to_async(agent_factory)()
    llm_settings.fail(500)
    from agents_app.runtime.loop import LlmUnavailable

    with pytest.raises(LlmUnavailable):
        await _events(agent)
    [span] = spans.named("chat ")
    assert span.attributes["error.type"] == "InternalServerError"
    assert span.status.status_code.name == "ERROR"
    assert "gen_ai.usage.input_tokens" not in span.attributes
