"""Hostile output (issue 9): the model and a sub-agent send text nothing downstream accepts —
lone UTF-16 surrogates (on the wire as the JSON escapes "\\ud800"), NUL, one 1 MB chunk, frames
that are not JSON, an error code as a string — and every turn still ends with `done` over a real
HTTP stream and is stored, with the text made valid the same way in frames and rows.
"""
import asyncio
import json
import socket

import pytest
from asgiref.sync import sync_to_async

from agents_app.runtime.context import RunContext
from agents_app.runtime.events import Chunk
from agents_app.runtime.loop import MODEL_INTERRUPTED_TEXT
from chat_app.models import Message
from chat_app.runs.admission import turn_begin
from chat_app.runs.chat_input import ChatInput
from chat_app.runs.engine import FRAME_FAILED_MESSAGE, RunPlan, RunTask
from chat_app.runs.lease import RunLease
from chat_app.tests.runs.test_nul_characters import _strings
from subagents_app.client import CONNECT_FAILED_NOTICE, CONNECT_FAILED_TEXT, TOKEN_EXPIRED_NOTICE
from testkit.model.fake_llm import Reply
from testkit.subagents.contract_agent import CHART, ERROR_MESSAGE, HUGE_CHUNK, answer_chunks
from testkit.web.sse import chat, parse_events

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.embedded]

FFFD = "\ufffd"


def _rows(result) -> list[Message]:
    conversation_id = result.frames[0]["conversation_id"]
    return list(Message.objects.filter(conversation_id=conversation_id).order_by("created_at", "seq"))


def _assert_valid(*values) -> None:
    """No NUL and nothing UTF-8 cannot encode, in any string of the values."""
    for text in (t for value in values for t in _strings(value)):
        assert "\x00" not in text
        text.encode()


def _assert_ended_and_stored(result) -> list[Message]:
    assert result.status == 200
    assert result.types[0] == "session" and result.types[-1] == "done"
    rows = _rows(result)
    assert str(rows[-1].id) == result.frames[-1]["message_id"]
    for row in rows:
        _assert_valid(row.content, row.meta, row.chart)
    _assert_valid(result.frames)
    return rows


def test_model_text_with_lone_surrogates_and_nul(live_asgi, llm_settings, agent, auth_headers):
    llm_settings.reply_text("半个表情\ud83d，空\x00字符，\udc00结尾。", chunk_size=3)
    result = chat(live_asgi, {"message": "你好"}, headers=auth_headers, timeout=10)

    rows = _assert_ended_and_stored(result)
    shown = f"半个表情{FFFD}，空字符，{FFFD}结尾。"
    assert result.text == result.frames[-1]["full_text"] == shown
    assert "\\u0000" not in result.raw
    assert rows[-1].content == shown and "interrupted" not in rows[-1].meta


def test_tool_arguments_and_sub_agent_answer_with_lone_surrogates_and_nul(
    live_asgi, llm_settings, agent, auth_headers, subagent_server
):
    llm_settings.reply_tool_calls(("call_canteen", {"message": "[[mode:malformed]] 吃\ud800啥\x00"}),
                                  text="我查\ud800一下。")
    llm_settings.reply_text("查到了\x00。")
    result = chat(live_asgi, {"message": "今天吃啥"}, headers=auth_headers, timeout=10)

    _, calls_row, tool_row, reply = _assert_ended_and_stored(result)
    asked = f"[[mode:malformed]] 吃{FFFD}啥"
    assert subagent_server.last_request.message == asked  # the sub-agent got valid text
    call = result.of("tool_call")[0]
    assert json.loads(call["args"]) == {"message": asked}
    assert calls_row.content == f"我查{FFFD}一下。"
    assert calls_row.meta["tool_calls"][0]["function"]["arguments"] == call["args"]
    # Each live chunk is cleaned on its own; the whole answer joins the emoji's two halves.
    assert [c["content"] for c in result.of("tool_chunk")] == [
        f"半个表情{FFFD}", "空字符", f"{FFFD}尾巴", f"完整{FFFD}", f"{FFFD}。"]
    whole = f"半个表情{FFFD}空字符{FFFD}尾巴完整😀。"
    assert tool_row.content == whole and tool_row.meta["ok"] is True
    assert llm_settings.requests[1].messages[-1] == {"role": "tool", "tool_call_id": call["call_id"],
                                                     "content": whole}  # the model got it too
    chart = {**CHART, "title": f"人数{FFFD}", "labels": ["一食堂", "二食堂", "三食堂"]}
    assert result.frames[-1]["chart"] == reply.chart == chart
    assert reply.content == "查到了。" and result.text == f"我查{FFFD}一下。查到了。"


def test_one_megabyte_chunks_from_the_model_and_a_sub_agent(
    live_asgi, llm_settings, agent, auth_headers, subagent_server, settings
):
    # 1 MB pieces must pass every layer whole; the caps that cut them by default (issue 20:
    # LLM_MAX_REPLY_BYTES, MAX_TOOL_RESULT_BYTES) are tested in agents_app/tests/test_hostile_model.py.
    settings.LLM_MAX_REPLY_BYTES = settings.MAX_TOOL_RESULT_BYTES = 2 * 1024 * 1024
    big = "答" * 350_000  # 1.05 MB as UTF-8, one chunk
    llm_settings.reply_tool_calls(("call_canteen", {"message": "[[mode:huge]]"}))
    llm_settings.reply_text(big, chunk_size=len(big))
    result = chat(live_asgi, {"message": "全部数据"}, headers=auth_headers, timeout=30)

    _, _, tool_row, reply = _assert_ended_and_stored(result)
    assert [c["content"] for c in result.of("tool_chunk")] == [HUGE_CHUNK]
    assert result.text == reply.content == big
    assert tool_row.content == HUGE_CHUNK


def test_a_model_frame_that_is_not_json_cuts_the_answer_which_is_stored(live_asgi, llm_settings, agent, auth_headers):
    llm_settings.queue(Reply(text="先说一半再说一半", chunk_size=2, junk_after_chunks=3))
    result = chat(live_asgi, {"message": "你好"}, headers=auth_headers, timeout=10)

    rows = _assert_ended_and_stored(result)
    assert result.of("error") == [{"type": "error", "code": 50003, "message": MODEL_INTERRUPTED_TEXT}]
    assert result.frames[-1]["interrupted"] is True
    assert rows[-1].content == result.text == "先说一半"
    assert rows[-1].meta["interrupted"] is True


@pytest.mark.parametrize("mode", ["nonjson", "deep"])
def test_sub_agent_frames_that_cannot_be_decoded_are_skipped(
    live_asgi, llm_settings, agent, auth_headers, subagent_server, mode
):
    llm_settings.reply_tool_calls(("call_canteen", {"message": f"[[mode:{mode}]] 菜单"}))
    llm_settings.reply_text("好的。")
    result = chat(live_asgi, {"message": "菜单"}, headers=auth_headers, timeout=10)

    _, _, tool_row, _ = _assert_ended_and_stored(result)
    assert result.of("tool_result")[0]["ok"] is True
    assert tool_row.content == "".join(answer_chunks("菜单"))


def test_error_code_as_a_string_keeps_the_log_in_again_signal(
    live_asgi, llm_settings, agent, auth_headers, subagent_server
):
    llm_settings.reply_tool_calls(("call_canteen", {"message": '[[mode:coded]] "40102"'}))
    llm_settings.reply_text("请重新登录。")
    result = chat(live_asgi, {"message": "查课表"}, headers=auth_headers, timeout=10)

    rows = _assert_ended_and_stored(result)
    assert result.of("error") == [{"type": "error", "code": 40102, "message": TOKEN_EXPIRED_NOTICE}]
    assert rows[-1].meta["errors"] == [{"code": 40102, "message": TOKEN_EXPIRED_NOTICE}]
    assert ERROR_MESSAGE in rows[2].content  # the tool row keeps what the sub-agent said


def test_unreachable_sub_agent_student_reads_chinese_model_reads_the_reason(
    live_asgi, llm_settings, agent_factory, sub_agent_factory, auth_headers
):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    down = sub_agent_factory(base_url=f"http://127.0.0.1:{port}", timeout_sec=2)
    agent_factory(slug="xiaozhi", is_default=True, sub_agents=[down])
    llm_settings.reply_tool_calls(("call_canteen", {"message": "今天吃啥"}))
    llm_settings.reply_text("食堂服务暂时连不上。")
    result = chat(live_asgi, {"message": "今天吃啥"}, headers=auth_headers, timeout=10)

    _, _, tool_row, _ = _assert_ended_and_stored(result)
    notice = CONNECT_FAILED_NOTICE.format(label="食堂助手")
    tool_result = result.of("tool_result")[0]
    assert (tool_result["ok"], tool_result["error"]) == (False, notice)
    assert result.of("error") == [{"type": "error", "code": 50003, "message": notice}]
    for_model = llm_settings.requests[1].messages[-1]["content"]
    reason_prefix = CONNECT_FAILED_TEXT.format(reason="")
    assert for_model.startswith(reason_prefix) and len(for_model) > len(reason_prefix)
    assert tool_row.content == for_model and tool_row.meta["error"] == notice


class _Unencodable:
    """Stands in for a bug: an event whose frame cannot be encoded as JSON. Nothing the runtime
    builds is like this (its text is cleaned), which is why the run's last line of defence
    needs an event made up to be reached."""

    def frame(self) -> dict:
        return {"type": "chunk", "content": object()}


async def _story_then_a_bug(*, agent, history, ctx):
    """A scripted event source for the run (RunPlan.events): two chunks, then the bad event."""
    yield Chunk("第一段。")
    yield Chunk("第二段。")
    yield _Unencodable()
    yield Chunk("不会发出的第三段。")


async def test_a_frame_that_cannot_be_encoded_ends_the_run_with_error_and_done(agent, user):
    async def opening(lease):  # a turn admitted as any is, its events scripted
        start = await sync_to_async(turn_begin)(
            user=user, chat=ChatInput(message="讲个故事", conversation_id=None, agent=None, hint_domain=None),
            request_id="0123456789abcdef", slot_key=lease.key,
        )
        ctx = RunContext(request_id="0123456789abcdef", conversation_id=str(start.conversation_id), user_id=user.pk)
        return RunPlan(run=start.run, agent=start.agent, history=start.history, ctx=ctx, events=_story_then_a_bug), start

    run = RunTask(opening, lease=RunLease(user_id=user.pk, new_message=True))
    start = await run.opened
    raw, cursor, ended = b"", 0, False
    async with asyncio.timeout(10):
        while not ended:
            data, cursor, ended = await run.log.read(after=cursor, timeout=5)
            raw += data

    frames, _ = parse_events(raw.decode())
    assert [f["type"] for f in frames] == ["chunk", "chunk", "error", "done"]
    assert frames[-2] == {"type": "error", "code": 50002, "message": FRAME_FAILED_MESSAGE}
    done = frames[-1]
    assert done["interrupted"] is True and done["message_id"] == str(start.run.message_id)
    reply = await Message.objects.aget(id=start.run.message_id)
    assert reply.meta["interrupted"] is True
    assert reply.content == done["full_text"] == "第一段。第二段。"


def test_a_question_with_invalid_text_is_stored_valid(user, agent):
    """The request parser refuses such a body with a 400; the write cleans anyway, whoever calls it."""
    agent.sub_agents.update(domain="食堂")  # the hint must name one of the agent's domains
    start = turn_begin(user=user, chat=ChatInput(message="问\ud800题\x00", conversation_id=None, agent=None,
                                                 hint_domain="食堂\x00"), request_id="0123456789abcdef",
                       slot_key="")
    question = Message.objects.get(id=start.user_message_id)
    assert question.content == f"问{FFFD}题" and start.history == [{"role": "user", "content": f"问{FFFD}题"}]
    assert question.conversation.title == f"问{FFFD}题" and question.conversation.hint_domain == "食堂"
