"""One trace per turn (docs/operations.md, "Tracing"): a whole turn through the real stream
endpoint, with two tool calls in parallel (a sub-agent and an MCP tool over streamable HTTP),
recorded by the OpenTelemetry SDK's in-memory exporter; and what the sub-agent and the MCP
server received (traceparent) matches the tool spans."""
import json

import httpx
import pytest

from agents_app.mcp.connect import REQUEST_ID_META_KEY
from campus_agent.base.tracing import REQUEST_ID_ATTRIBUTE, TRACER_NAME
from testkit.web.sse import chat, read_rest, read_until

pytestmark = pytest.mark.django_db(transaction=True)

REQUEST_ID = "0af7651916cd43dd8448eb211c80319c"  # nginx's $request_id shape
ROUND_USAGE = [{"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150},
               {"prompt_tokens": 260, "completion_tokens": 12, "total_tokens": 272}]


def _traceparent(span) -> str:
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def _ours(recorder) -> list:
    return [s for s in recorder.spans() if s.instrumentation_scope.name == TRACER_NAME]


@pytest.fixture
def traced_agent(agent_factory, sub_agent, mcp_service_http):
    return agent_factory(sub_agents=[sub_agent], mcp_services=[mcp_service_http])


def _turn(live_asgi, llm, auth_headers):
    llm.reply_tool_calls(("call_canteen", {"message": "今天吃啥"}), ("http-tools__request_info", {}),
                         usage=ROUND_USAGE[0])
    llm.reply_text("一食堂有红烧肉。", usage=ROUND_USAGE[1])
    result = chat(live_asgi, {"message": "今天吃啥"}, headers={**auth_headers, "X-Request-Id": REQUEST_ID})
    assert result.status == 200 and result.types[-1] == "done", result.raw
    return result


def test_a_turn_is_one_trace_with_model_rounds_and_parallel_tools(
    live_asgi, llm_settings, traced_agent, auth_headers, subagent_server, spans
):
    result = _turn(live_asgi, llm_settings, auth_headers)
    session = result.frames[0]
    [run] = spans.wait_for("invoke_agent")  # the run ends after `done` was sent: wait for it

    # The run is the root; model rounds and tool calls are its children, in one trace.
    assert run.parent is None
    assert run.name == "invoke_agent 校园小智"
    assert dict(run.attributes) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": "openai",
        "gen_ai.agent.name": "校园小智",
        "gen_ai.agent.id": "xiaozhi",
        "gen_ai.request.model": "fake-model",
        "gen_ai.conversation.id": session["conversation_id"],
        "campus.run_id": session["run_id"],
        REQUEST_ID_ATTRIBUTE: REQUEST_ID,
        "campus.run.interrupted": False,
        "campus.run.stopped": False,
        "campus.run.paused": False,
    }
    ours = _ours(spans)
    assert {s.context.trace_id for s in ours} == {run.context.trace_id}
    assert all(s.attributes[REQUEST_ID_ATTRIBUTE] == REQUEST_ID for s in ours)

    rounds = sorted(spans.named("chat "), key=lambda s: s.start_time)
    assert [(s.name, s.parent.span_id) for s in rounds] == [("chat fake-model", run.context.span_id)] * 2
    for number, (span, usage) in enumerate(zip(rounds, ROUND_USAGE, strict=True), start=1):
        assert span.attributes["gen_ai.operation.name"] == "chat"
        assert span.attributes["gen_ai.request.model"] == "fake-model"
        assert span.attributes["gen_ai.provider.name"] == span.attributes["gen_ai.system"] == "openai"
        assert span.attributes["gen_ai.usage.input_tokens"] == usage["prompt_tokens"]
        assert span.attributes["gen_ai.usage.output_tokens"] == usage["completion_tokens"]
        assert span.attributes["campus.round"] == number
        assert span.attributes["server.address"] == "127.0.0.1"
        assert span.attributes["gen_ai.conversation.id"] == session["conversation_id"]
    assert rounds[0].attributes["campus.tool_calls"] == 2 and "campus.tool_calls" not in rounds[1].attributes

    calls = {f["tool"]: f["call_id"] for f in result.of("tool_call")}
    tools = {s.attributes["gen_ai.tool.name"]: s for s in spans.named("execute_tool ")}
    assert set(tools) == {"call_canteen", "http-tools__request_info"}
    for name, span in tools.items():
        assert span.name == f"execute_tool {name}"
        assert span.parent.span_id == run.context.span_id
        assert span.attributes["gen_ai.operation.name"] == "execute_tool"
        assert span.attributes["gen_ai.tool.call.id"] == calls[name]
        assert span.attributes["gen_ai.tool.type"] == "function"
        assert span.attributes["campus.tool.ok"] is True
        # Between the two rounds: after the first ended, before the second began.
        assert rounds[0].end_time <= span.start_time and span.end_time <= rounds[1].start_time
    canteen, mcp = tools["call_canteen"], tools["http-tools__request_info"]
    assert (canteen.attributes["campus.tool.kind"], mcp.attributes["campus.tool.kind"]) == ("subagent", "mcp")
    # Parallel: each began before the other ended.
    assert canteen.start_time < mcp.end_time and mcp.start_time < canteen.end_time

    # The sub-agent received the traceparent of its tool span.
    assert subagent_server.last_request.headers["traceparent"] == _traceparent(canteen)
    assert subagent_server.last_request.headers["x-request-id"] == REQUEST_ID

    # The MCP server received, in the header and in `_meta`, the traceparent of the SDK's client
    # span for that call, itself a child of the tool span.
    [sent] = [s for s in spans.named("MCP send tools/call") if s.parent.span_id == mcp.context.span_id]
    tool_message = next(m for m in llm_settings.requests[1].messages if m.get("tool_call_id") == calls[mcp.attributes["gen_ai.tool.name"]])
    seen = json.loads(tool_message["content"])
    assert seen["headers"] == {"x-request-id": REQUEST_ID, "traceparent": _traceparent(sent)}
    assert seen["meta"]["traceparent"] == _traceparent(sent)
    assert seen["meta"][REQUEST_ID_META_KEY] == REQUEST_ID
    # The SDK's own spans carry the request id too (stamped as they start).
    assert sent.attributes[REQUEST_ID_ATTRIBUTE] == REQUEST_ID


def test_a_failed_tool_marks_its_span(live_asgi, llm_settings, traced_agent, auth_headers, subagent_server, spans):
    llm_settings.reply_tool_calls(("call_canteen", {"message": "[[mode:http500]]"}), ("http-tools__fail", {}))
    llm_settings.reply_text("暂时查不到。")
    result = chat(live_asgi, {"message": "今天吃啥"}, headers=auth_headers)
    assert result.types[-1] == "done"
    spans.wait_for("invoke_agent")
    tools = {s.attributes["gen_ai.tool.name"]: s for s in spans.named("execute_tool ")}
    canteen, fail = tools["call_canteen"], tools["http-tools__fail"]
    assert (canteen.attributes["campus.tool.ok"], canteen.attributes["error.type"]) == (False, "50001")
    assert (fail.attributes["campus.tool.ok"], fail.attributes["error.type"]) == (False, "tool_error")
    assert canteen.status.status_code.name == fail.status.status_code.name == "ERROR"


def test_off_no_span_and_no_traceparent(live_asgi, llm_settings, traced_agent, auth_headers, subagent_server):
    from campus_agent.base.tracing import tracer

    assert tracer() is None
    _turn(live_asgi, llm_settings, auth_headers)
    assert "traceparent" not in subagent_server.last_request.headers
    assert subagent_server.last_request.headers["x-request-id"] == REQUEST_ID


def test_a_stopped_run_is_interrupted_not_an_error(live_asgi, llm_settings, agent, auth_headers, spans):
    llm_settings.reply_tool_calls(("call_canteen", {"message": "[[mode:trickle]]"}))
    with httpx.Client(base_url=live_asgi, timeout=15) as client:
        with client.stream("POST", "/api/v1/chat", json={"message": "慢慢说"}, headers=auth_headers) as response:
            blocks, _ = read_until(response, lambda f: f["type"] == "tool_chunk")  # the sub-agent is talking
            run_id = blocks[0][1]["run_id"]
            assert client.post(f"/api/v1/runs/{run_id}/stop", headers=auth_headers).status_code == 202
            read_rest(response)
    [run] = spans.wait_for("invoke_agent")
    assert (run.attributes["campus.run.interrupted"], run.attributes["campus.run.stopped"]) == (True, True)
    assert run.status.status_code.name == "UNSET"
    [tool] = spans.named("execute_tool call_canteen")
    assert tool.attributes["campus.cancelled"] is True and tool.parent.span_id == run.context.span_id


def test_a_run_that_waits_for_approval_and_its_resumption_are_two_run_spans(
    live_asgi, llm_settings, agent, auth_headers, subagent_server, spans
):
    agent.sub_agents.update(approval_policy="ask")
    llm_settings.reply_tool_calls(("call_canteen", {"message": "订午饭"}))
    llm_settings.reply_text("订好了。")
    with httpx.Client(base_url=live_asgi, timeout=15) as client:
        with client.stream("POST", "/api/v1/chat", json={"message": "订午饭"}, headers=auth_headers) as response:
            blocks, _ = read_until(response, lambda f: f["type"] == "approval_required")
            [paused] = spans.wait_for("invoke_agent")
            assert paused.attributes["campus.run.paused"] is True and not spans.named("execute_tool")
            run_id, call_id = blocks[0][1]["run_id"], blocks[-1][1]["call_id"]
            client.post(f"/api/v1/runs/{run_id}/approvals", headers=auth_headers,
                        json={"call_id": call_id, "decision": "approve"})
            read_rest(response)
    first, resumed = spans.wait_for("invoke_agent", count=2)
    assert first.attributes["campus.run_id"] == resumed.attributes["campus.run_id"] == run_id
    assert resumed.attributes["campus.run.paused"] is False
    [tool] = spans.named("execute_tool")
    assert tool.parent.span_id == resumed.context.span_id  # the approved call ran in the resumed run
