"""The stream when things go wrong: client gone, model failing, budget spent, idle pings."""
import time

import httpx
import pytest

from agents_app.runtime.loop import MODEL_INTERRUPTED_TEXT, TURN_TIMEOUT_TEXT
from agents_app.runtime.turn import MODEL_UNAVAILABLE
from chat_app.models import Message
from chat_app.runs.lease import stream_slots_held
from chat_app.runs.recording import TOOL_CUT_MESSAGE
from testkit.model.fake_llm import Reply
from testkit.polling import wait_for
from testkit.web.sse import chat, parse_events

pytestmark = pytest.mark.django_db(transaction=True)

LONG_ANSWER = "第一段。第二段。第三段。第四段。第五段。第六段。第七段。第八段。"


def _read_until(base, headers, body, *, stop) -> tuple[list[dict], str]:
    """Streams until `stop(frames)` is true, then closes the connection (the client goes away)."""
    frames, raw = [], ""
    client = httpx.Client(base_url=base, timeout=10)
    with client.stream("POST", "/api/v1/chat", json=body, headers=headers) as response:
        assert response.status_code == 200
        for text in response.iter_text():
            raw += text
            frames, _ = parse_events(raw[: raw.rfind("\n\n") + 2])
            if stop(frames):
                break
    client.close()  # closes the socket: uvicorn reports http.disconnect to Django
    return frames, raw


@pytest.fixture
def no_fallback(settings):
    settings.KEYWORD_FALLBACK_ENABLED = False


def test_client_gone_mid_answer_the_run_finishes_and_is_stored(live_asgi, llm_settings, agent, auth_headers, user):
    """The client's connection is not the turn (docs/design.md#runs): hanging up mid-answer leaves the
    run to finish; the whole reply is stored and the stream slot is given back at its end."""
    llm_settings.queue(Reply(text=LONG_ANSWER, chunk_size=4, chunk_delay=0.05))
    frames, _ = _read_until(
        live_asgi, auth_headers, {"message": "讲个长故事"}, stop=lambda fs: sum(f["type"] == "chunk" for f in fs) >= 2
    )
    message_id = frames[0]["message_id"]

    reply = wait_for(lambda: Message.objects.filter(id=message_id).first())
    assert reply.content == LONG_ANSWER and "interrupted" not in reply.meta
    assert reply.request_id == Message.objects.get(role="user").request_id
    wait_for(lambda: stream_slots_held(user_id=user.pk) == 0)  # the stream slot is given back


def test_client_gone_during_a_tool_call_the_round_and_answer_are_stored(
    live_asgi, llm_settings, agent, auth_headers, subagent_server
):
    llm_settings.reply_tool_calls(("call_canteen", {"message": "查人数"}), text="稍等。")
    llm_settings.reply_text("人不多。")
    frames, _ = _read_until(
        live_asgi, auth_headers, {"message": "食堂人多吗"}, stop=lambda fs: any(f["type"] == "tool_chunk" for f in fs)
    )
    call_id = next(f for f in frames if f["type"] == "tool_call")["call_id"]
    reply = wait_for(lambda: Message.objects.filter(id=frames[0]["message_id"]).first())
    rows = list(Message.objects.filter(conversation_id=frames[0]["conversation_id"]).order_by("created_at", "seq"))
    assert [r.role for r in rows] == ["user", "assistant", "tool", "assistant"]
    calls_row, tool_row = rows[1], rows[2]
    assert calls_row.content == "稍等。"
    assert calls_row.meta["tool_calls"][0]["id"] == call_id
    assert tool_row.meta == {"tool_call_id": call_id, "tool": "call_canteen", "ok": True}
    assert reply.content == "人不多。" and "interrupted" not in reply.meta


def test_model_down_answers_error_then_done(live_asgi, llm_settings, agent, auth_headers, no_fallback):
    llm_settings.fail(500)
    result = chat(live_asgi, {"message": "你好"}, headers=auth_headers)
    assert result.status == 200
    assert result.types == ["session", "error", "done"]
    assert result.frames[1] == {"type": "error", "code": 50003, "message": MODEL_UNAVAILABLE}
    assert result.frames[-1]["interrupted"] is True
    reply = Message.objects.get(id=result.frames[-1]["message_id"])
    assert reply.meta["interrupted"] is True
    assert reply.meta["errors"] == [{"code": 50003, "message": MODEL_UNAVAILABLE}]
    assert Message.objects.filter(role="user", content="你好").exists()


def test_model_cut_mid_stream_keeps_what_was_said(live_asgi, llm_settings, agent, auth_headers, no_fallback):
    llm_settings.queue(Reply(text=LONG_ANSWER, chunk_size=4, drop_after_chunks=4))
    result = chat(live_asgi, {"message": "讲个故事"}, headers=auth_headers)
    assert result.types[0] == "session" and result.types[-2:] == ["error", "done"]
    assert result.of("error")[0]["code"] == 50003
    assert result.of("error")[0]["message"] == MODEL_INTERRUPTED_TEXT
    said = result.text
    assert said and LONG_ANSWER.startswith(said) and said != LONG_ANSWER
    assert result.frames[-1]["interrupted"] is True  # the page marks the reply cut at once
    reply = Message.objects.get(id=result.frames[-1]["message_id"])
    assert reply.content == said and reply.meta["interrupted"] is True


def test_turn_budget_cuts_a_hung_model(live_asgi, llm_settings, agent, auth_headers, settings, no_fallback):
    settings.TURN_BUDGET_SEC = 1.0
    llm_settings.queue(Reply(text=LONG_ANSWER, chunk_size=4, hang_after_chunks=3))
    started = time.monotonic()
    result = chat(live_asgi, {"message": "讲个故事"}, headers=auth_headers)
    assert time.monotonic() - started < 4
    assert result.types[-2:] == ["error", "done"]
    assert result.of("error")[0] == {"type": "error", "code": 50003, "message": TURN_TIMEOUT_TEXT}
    assert result.frames[-1]["interrupted"] is True
    reply = Message.objects.get(id=result.frames[-1]["message_id"])
    assert reply.meta["interrupted"] is True and reply.content == result.text != ""


def test_a_tool_running_past_the_budget_is_cut(
    live_asgi, llm_settings, agent, auth_headers, settings, subagent_server
):
    settings.TURN_BUDGET_SEC = 0.5
    llm_settings.reply_tool_calls(("call_canteen", {"message": "[[mode:trickle]] 慢慢说"}))
    result = chat(live_asgi, {"message": "食堂"}, headers=auth_headers)
    # The cut call gets its result (interrupted) just before `done` (issue 20 point 12).
    assert result.types[-3:] == ["error", "tool_result", "done"]
    cut = result.of("tool_result")[-1]
    assert cut == {"type": "tool_result", "call_id": result.of("tool_call")[0]["call_id"], "tool": "call_canteen",
                   "ok": False, "error": TOOL_CUT_MESSAGE, "interrupted": True}
    assert result.of("error")[0] == {"type": "error", "code": 50003, "message": TURN_TIMEOUT_TEXT}
    assert result.frames[-1]["interrupted"] is True
    reply = Message.objects.get(id=result.frames[-1]["message_id"])
    assert reply.meta["interrupted"] is True
    tool_row = Message.objects.get(role="tool")
    assert tool_row.meta["tool_call_id"] == result.of("tool_call")[0]["call_id"]
    # What the sub-agent had streamed before the cut stays, the cut said after it (issue 20 point 12).
    streamed = "".join(f["content"] for f in result.of("tool_chunk"))
    assert tool_row.content == (f"{streamed}\n\n（{TOOL_CUT_MESSAGE}）" if streamed else TOOL_CUT_MESSAGE)
    assert tool_row.meta["interrupted"] is True


def test_keyword_fallback_answer_is_stored_as_such(
    live_asgi, llm_settings, agent, auth_headers, settings, subagent_server
):
    settings.KEYWORD_FALLBACK_ENABLED = True
    llm_settings.fail(500)
    result = chat(live_asgi, {"message": "食堂今天吃什么"}, headers=auth_headers)
    done = result.frames[-1]
    assert done["type"] == "done" and done.get("fallback") is True and "interrupted" not in done
    rows = list(Message.objects.filter(conversation_id=result.frames[0]["conversation_id"]).order_by("created_at", "seq"))
    assert [r.role for r in rows] == ["user", "assistant", "tool", "assistant"]
    assert rows[2].meta["tool_call_id"] == result.of("tool_call")[0]["call_id"] == rows[1].meta["tool_calls"][0]["id"]
    assert rows[3].meta.get("fallback") is True and "interrupted" not in rows[3].meta
    assert rows[3].chart == done["chart"]
    # The notice before the call is its row's text; the sub-agent's live text is the reply's (not lost).
    assert rows[3].content and done["full_text"] == rows[1].content + rows[3].content


def test_idle_stream_sends_pings(live_asgi, llm_settings, agent, auth_headers, settings):
    settings.SSE_PING_SEC = 0.2
    llm_settings.queue(Reply(text="想好了。", stall_sec=0.9))
    result = chat(live_asgi, {"message": "你想想"}, headers=auth_headers)
    assert result.pings >= 2
    assert result.types[0] == "session" and result.types[-1] == "done"
    assert set(result.types[1:-1]) == {"chunk"}
    assert result.raw.index(": ping") > result.raw.index('"type":"session"')
    assert result.text == "想好了。"


def test_conversation_deleted_while_answering_stops_its_run_cleanly(live_asgi, llm_settings, agent, auth_headers, user):
    llm_settings.queue(Reply(text=LONG_ANSWER, chunk_size=4, chunk_delay=0.1))
    frames, raw = [], ""
    with httpx.Client(base_url=live_asgi, timeout=10, headers=auth_headers) as client:
        with client.stream("POST", "/api/v1/chat", json={"message": "讲个长故事"}) as response:
            for text in response.iter_text():
                raw += text
                frames, _ = parse_events(raw[: raw.rfind("\n\n") + 2])
                if len(frames) == 2:  # session + first chunk: the turn is running
                    deleted = client.delete(f"/api/v1/conversations/{frames[0]['conversation_id']}")
                    assert deleted.status_code == 204
        frames, _ = parse_events(raw)
    # the run is stopped with its conversation (docs/security.md#one-run-per-conversation)
    assert frames[-1]["type"] == "done" and frames[-1]["interrupted"] is True
    assert LONG_ANSWER.startswith(frames[-1]["full_text"]) and frames[-1]["full_text"] != LONG_ANSWER
    assert not Message.objects.exists()
    wait_for(lambda: stream_slots_held(user_id=user.pk) == 0)
