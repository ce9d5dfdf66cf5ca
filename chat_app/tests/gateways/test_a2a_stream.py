"""A chat turn with an A2A sub-agent, end to end: the real ASGI app on loopback, the scripted
model calling `call_library`, an a2a-sdk agent answering (testkit/subagents/a2a_agent.py)."""
import json

import httpx
import pytest

from subagents_app.client import ERROR_EVENT_NOTICE, ERROR_EVENT_TEXT
from testkit.subagents.a2a_agent import FAILED_MESSAGE, STATUS_TEXT, answer_chunks
from testkit.web.sse import chat, read_rest, read_until

pytestmark = pytest.mark.django_db(transaction=True)

CAMPUS_TOKEN = "campus-token-a2a-0123456789"


@pytest.fixture
def library_agent(agent_factory, a2a_sub_agent_factory):
    """The default agent offered the A2A `library` sub-agent, whose card asks for bearer auth."""
    return agent_factory(sub_agents=[a2a_sub_agent_factory("bearer", display_name="图书馆助手", timeout_sec=10)])


@pytest.fixture
def sso_headers(user, token_for) -> dict:
    """A student signed in through campus SSO: the turn carries a campus token."""
    return {"Authorization": f"Bearer {token_for(user, campus_token=CAMPUS_TOKEN)}"}


def test_turn_streams_the_a2a_answer_as_tool_chunks(live_asgi, llm_settings, library_agent, sso_headers, a2a_server):
    question = "图书馆几点关门"
    llm_settings.reply_tool_calls(("call_library", {"message": question}), text="我查一下。")
    llm_settings.reply_text("总馆晚上十点半关门。")

    result = chat(live_asgi, {"message": "图书馆今天几点关门？"}, headers=sso_headers)

    frames = result.frames
    answer = "".join(answer_chunks(question))
    assert next(f for f in frames if f["type"] == "tool_call")["tool"] == "call_library"
    chunks = [f["content"] for f in frames if f["type"] == "tool_chunk"]
    assert chunks == [STATUS_TEXT + "\n", *answer_chunks(question)]  # live, piece by piece
    tool_result = next(f for f in frames if f["type"] == "tool_result")
    assert tool_result["ok"] is True
    # The model reads the final artifact text as the tool's result.
    tool_message = [m for m in llm_settings.requests[-1].messages if m["role"] == "tool"][-1]
    assert tool_message["content"] == answer
    assert frames[-1]["type"] == "done" and frames[-1]["full_text"].endswith("总馆晚上十点半关门。")
    # The card declares HTTP bearer auth: the student's campus token went as the credential.
    (rpc,) = a2a_server.rpc_requests("bearer")
    assert rpc.headers["authorization"] == f"Bearer {CAMPUS_TOKEN}"
    assert rpc.headers["x-request-id"] == frames[0]["request_id"]  # the turn's id reaches the agent
    seen_by_model = json.dumps([r.messages for r in llm_settings.requests], ensure_ascii=False)
    assert CAMPUS_TOKEN not in seen_by_model


def test_failed_a2a_task_is_a_failed_tool_result(live_asgi, llm_settings, library_agent, sso_headers):
    llm_settings.reply_tool_calls(("call_library", {"message": "[[mode:failed]] 查馆藏"}))
    llm_settings.reply_text("馆藏系统暂时不可用。")

    frames = chat(live_asgi, {"message": "帮我查馆藏"}, headers=sso_headers).frames

    tool_result = next(f for f in frames if f["type"] == "tool_result")
    assert tool_result["ok"] is False and tool_result["error"] == ERROR_EVENT_NOTICE.format(label="图书馆助手")
    tool_message = [m for m in llm_settings.requests[-1].messages if m["role"] == "tool"][-1]
    assert tool_message["content"] == ERROR_EVENT_TEXT.format(message=FAILED_MESSAGE)
    assert frames[-1]["type"] == "done"


def test_stop_cancels_the_a2a_task(live_asgi, llm_settings, library_agent, sso_headers, a2a_server):
    llm_settings.reply_tool_calls(("call_library", {"message": "[[mode:hang]] 一直查"}), text="我查一下。")
    with httpx.Client(base_url=live_asgi, timeout=15) as client:
        with client.stream("POST", "/api/v1/chat", json={"message": "图书馆"}, headers=sso_headers) as response:
            blocks, _ = read_until(response, lambda f: f["type"] == "tool_chunk" and f["content"] == "A2A")
            run_id = blocks[0][1]["run_id"]
            answer = client.post(f"/api/v1/runs/{run_id}/stop", headers=sso_headers)
            assert (answer.status_code, answer.json()) == (202, {"status": "stopping"})
            # What the A2A agent sees of the stop: tasks/cancel for its task.
            assert a2a_server.cancelled.wait(timeout=5)
            rest = read_rest(response)
    assert '"interrupted":true' in rest
    assert len(a2a_server.cancelled_tasks) == 1
    cancel_calls = a2a_server.rpc_requests("bearer")[1:]
    assert cancel_calls and cancel_calls[-1].headers["authorization"] == f"Bearer {CAMPUS_TOKEN}"


def test_an_a2a_call_is_a_tool_span_whose_traceparent_the_agent_receives(
    live_asgi, llm_settings, library_agent, sso_headers, a2a_server, spans
):
    llm_settings.reply_tool_calls(("call_library", {"message": "图书馆几点关门"}))
    llm_settings.reply_text("十点半。")
    assert chat(live_asgi, {"message": "图书馆几点关门"}, headers=sso_headers).frames[-1]["type"] == "done"
    [tool] = spans.wait_for("execute_tool")
    assert tool.attributes["campus.tool.kind"] == "a2a" and tool.attributes["gen_ai.tool.name"] == "call_library"
    context = tool.get_span_context()
    received = [r.headers.get("traceparent", "") for r in a2a_server.rpc_requests("bearer")]
    assert received and all(f"-{context.trace_id:032x}-{context.span_id:016x}-" in t for t in received)
