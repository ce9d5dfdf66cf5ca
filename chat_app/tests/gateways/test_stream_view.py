"""POST /api/v1/chat end to end: real ASGI app, scripted model, contract sub-agent (docs/design.md#the-chat-stream)."""
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from django.conf import settings
from django.db import connection

from chat_app.models import Conversation, Message
from testkit.subagents.contract_agent import CHART, answer_chunks
from testkit.web.sse import chat

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.embedded]


def _rows(conversation_id) -> list[Message]:
    return list(Message.objects.filter(conversation_id=conversation_id).order_by("created_at", "seq"))


def test_text_answer_frames_headers_and_rows(live_asgi, llm_settings, agent, auth_headers, user):
    usage = {"prompt_tokens": 12, "completion_tokens": 9, "total_tokens": 21, "prompt_tokens_details": {"cached_tokens": 8}}
    llm_settings.reply_text("你好，我是校园小智，有什么可以帮你？", usage=usage)
    result = chat(live_asgi, {"message": "  你好\n  小智  "}, headers=auth_headers)

    assert result.status == 200
    assert result.headers["content-type"].startswith("text/event-stream")
    assert result.headers["cache-control"] == "no-cache"
    assert result.headers["x-accel-buffering"] == "no"
    request_id = result.headers["x-request-id"]
    assert result.types[0] == "session" and result.types[-1] == "done"
    assert set(result.types[1:-1]) == {"chunk"}
    session, done = result.frames[0], result.frames[-1]
    assert session["request_id"] == request_id
    assert result.text == done["full_text"] == "你好，我是校园小智，有什么可以帮你？"
    assert done["message_id"] == session["message_id"] and done["chart"] is None
    assert done["usage"] == usage  # what the turn cost, cached prompt tokens included
    assert "interrupted" not in done and "fallback" not in done  # only said when true
    assert '"你好' in result.raw  # ensure_ascii=False: Chinese stays readable on the wire

    conversation = Conversation.objects.get(id=session["conversation_id"])
    assert conversation.user == user and conversation.agent == agent
    assert conversation.title == "你好 小智"
    user_row, reply = _rows(conversation.id)
    assert (user_row.role, user_row.content, user_row.request_id) == ("user", "你好\n  小智", request_id)
    assert str(reply.id) == session["message_id"]
    assert (reply.role, reply.content, reply.agent_name, reply.request_id) == (
        "assistant", done["full_text"], agent.name, request_id)
    assert reply.meta == {"usage": usage, "provider": "default", "model": "fake-model"}
    assert reply.model == "fake-model" and (done["provider"], done["model"]) == ("default", "fake-model")
    assert (reply.prompt_tokens, reply.completion_tokens, reply.cached_tokens) == (12, 9, 8)

    sent = llm_settings.last_request
    assert sent.messages[0] == {"role": "system", "content": agent.system_prompt}
    assert sent.messages[-1] == {"role": "user", "content": "你好\n  小智"}
    assert sent.body["max_tokens"] == settings.LLM_MAX_TOKENS


def test_user_message_is_stored_before_the_model_is_called(live_asgi, llm_settings, agent, auth_headers):
    seen = []

    def stored_questions() -> list[str]:
        try:
            return list(Message.objects.filter(role="user").values_list("content", flat=True))
        finally:
            connection.close()

    def responder(request):
        # Called by the fake model (on its event loop) while the gateway waits for the answer;
        # the ORM is sync, so it asks from a thread of its own.
        with ThreadPoolExecutor(1) as pool:
            seen.append(pool.submit(stored_questions).result())
        return "收到"

    llm_settings.responder = responder
    result = chat(live_asgi, {"message": "先存再问"}, headers=auth_headers)
    assert result.types[-1] == "done"
    assert seen == [["先存再问"]]


def test_tool_round_frames_and_rows(live_asgi, llm_settings, agent, auth_headers, subagent_server):
    llm_settings.reply_tool_calls(("call_canteen", {"message": "今天中午吃啥"}), text="我帮你查一下。")
    llm_settings.reply_text("一食堂今天有红烧肉。")
    result = chat(live_asgi, {"message": "今天中午吃啥"}, headers=auth_headers)

    types = result.types
    assert types[0] == "session" and types[-1] == "done"
    assert "error" not in types
    first_call = types.index("tool_call")
    assert set(types[1:first_call]) == {"chunk"}  # the model's text before its call
    tool_call = result.of("tool_call")[0]
    assert tool_call["tool"] == "call_canteen"
    assert tool_call["args"] == '{"message": "今天中午吃啥"}'
    tool_chunks = result.of("tool_chunk")
    assert "".join(c["content"] for c in tool_chunks) == "".join(answer_chunks("今天中午吃啥"))
    assert all(c["call_id"] == tool_call["call_id"] for c in tool_chunks)
    tool_result = result.of("tool_result")[0]
    assert tool_result == {"type": "tool_result", "call_id": tool_call["call_id"], "tool": "call_canteen", "ok": True}
    assert types.index("tool_result") > types.index("tool_chunk") > first_call
    done = result.frames[-1]
    assert done["chart"] == CHART
    assert done["full_text"] == "我帮你查一下。一食堂今天有红烧肉。"

    user_row, calls_row, tool_row, reply = _rows(result.frames[0]["conversation_id"])
    assert calls_row.role == "assistant" and calls_row.content == "我帮你查一下。"
    assert calls_row.meta["tool_calls"] == [
        {"id": tool_call["call_id"], "type": "function",
         "function": {"name": "call_canteen", "arguments": tool_call["args"]}}
    ]
    assert tool_row.role == "tool"
    assert tool_row.meta == {"tool_call_id": tool_call["call_id"], "tool": "call_canteen", "ok": True}
    assert "".join(answer_chunks("今天中午吃啥")) in tool_row.content
    assert str(reply.id) == done["message_id"]
    assert reply.content == "一食堂今天有红烧肉。" and reply.chart == CHART
    assert "interrupted" not in reply.meta
    # The finished round is stored when it finishes (a dead worker loses none of it), the reply
    # when the run ends: each batch shares one instant, `seq` orders rows within it.
    assert [r.seq for r in (calls_row, tool_row)] == [1, 2] and calls_row.created_at == tool_row.created_at
    assert reply.created_at > tool_row.created_at
    assert {r.request_id for r in (user_row, calls_row, tool_row, reply)} == {result.headers["x-request-id"]}


def test_next_turn_gets_the_stored_history_with_tool_rows(live_asgi, llm_settings, agent, auth_headers):
    llm_settings.reply_tool_calls(("call_canteen", {"message": "菜单"}))
    llm_settings.reply_text("今天有面。")
    first = chat(live_asgi, {"message": "食堂菜单"}, headers=auth_headers)
    conversation_id = first.frames[0]["conversation_id"]
    call_id = first.of("tool_call")[0]["call_id"]

    llm_settings.reply_text("不客气。")
    second = chat(live_asgi, {"message": "谢谢", "conversation_id": conversation_id}, headers=auth_headers)
    assert second.frames[0]["conversation_id"] == conversation_id
    messages = llm_settings.last_request.messages
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert messages[2]["tool_calls"][0]["id"] == call_id
    assert messages[3]["tool_call_id"] == call_id
    assert messages[4] == {"role": "assistant", "content": "今天有面。"}
    assert messages[5] == {"role": "user", "content": "谢谢"}
    conversation = Conversation.objects.get(id=conversation_id)
    assert conversation.title == "食堂菜单"  # the first question names the conversation
    assert conversation.updated_at >= Message.objects.filter(conversation=conversation).latest("created_at").created_at


def test_history_window_never_starts_inside_a_tool_group(live_asgi, llm_settings, agent, auth_headers, settings):
    llm_settings.reply_tool_calls(("call_canteen", {"message": "菜单"}))
    llm_settings.reply_text("今天有面。")
    first = chat(live_asgi, {"message": "食堂菜单"}, headers=auth_headers)
    # Stored: user, assistant(tool_calls), tool, assistant, + the new user = 5; a window of 3
    # would start at the tool row, which the model API refuses.
    settings.MAX_HISTORY = 3
    llm_settings.reply_text("好的。")
    chat(live_asgi, {"message": "再见", "conversation_id": first.frames[0]["conversation_id"]}, headers=auth_headers)
    messages = llm_settings.last_request.messages
    assert [m["role"] for m in messages] == ["system", "assistant", "user"]


def test_long_first_question_title(live_asgi, llm_settings, agent, auth_headers):
    llm_settings.reply_text("好")
    question = "请问图书馆  周末\t开放时间是几点到几点，节假日是否也开放呢？"
    result = chat(live_asgi, {"message": question}, headers=auth_headers)
    flat = " ".join(question.split())
    assert Conversation.objects.get(id=result.frames[0]["conversation_id"]).title == flat[:24] + "..."


def test_agent_is_chosen_by_slug(live_asgi, llm_settings, agent, agent_factory, auth_headers):
    other = agent_factory(slug="library", name="图书馆助手", is_default=False, system_prompt="你是图书馆助手。")
    llm_settings.reply_text("我是图书馆助手。")
    result = chat(live_asgi, {"message": "你是谁", "agent": "library"}, headers=auth_headers)
    assert llm_settings.last_request.messages[0]["content"] == "你是图书馆助手。"
    conversation = Conversation.objects.get(id=result.frames[0]["conversation_id"])
    assert conversation.agent == other
    assert Message.objects.get(id=result.frames[-1]["message_id"]).agent_name == "图书馆助手"


def test_session_user_with_csrf_streams(live_asgi, llm_settings, agent, user, password):
    llm_settings.reply_text("页面用户你好")
    client = httpx.Client(base_url=live_asgi, timeout=15)
    try:
        client.get("/login/")
        client.post("/login/", data={"username": user.username, "password": password,
                                     "csrfmiddlewaretoken": client.cookies["csrftoken"]})
        client.get("/")  # the page rotates and sets the CSRF cookie after login
        token = client.cookies["csrftoken"]
        with client.stream("POST", "/api/v1/chat", json={"message": "你好"}, headers={"X-CSRFToken": token}) as response:
            raw = "".join(response.iter_text())
        assert response.status_code == 200, raw
        assert '"type":"done"' in raw and "页面用户你好" in raw
    finally:
        client.close()
