"""The answer, its reasoning and a tool's live text are checked against the word lists while
they stream: a `block` word never reaches any client, even split across chunks, and stops the
model; a `mask` word is masked in what is shown, stored and sent back to the model
(agents_app/runtime/screening.py, safety_app/screen.py, docs/safety.md#the-answer-while-it-streams).
Against the scripted model server and the contract sub-agent, through every gateway with its
official client."""

import json

import openai
import pytest
from a2a.helpers import get_artifact_text

from agents_app.runtime.screening import ANSWER_BLOCKED_TEXT, TOOL_TEXT_BLOCKED_TEXT
from audit_app.models import AuditEvent
from chat_app.accounts.api_keys import api_key_create
from chat_app.models import Message
from chat_app.tests.gateways.test_a2a_server import _question, _send
from chat_app.tests.gateways.test_mcp_server import mcp_session
from safety_app.matcher import normalised
from safety_app.models import ListWord, WordList
from testkit.model.fake_llm import Reply
from testkit.web.sse import chat

pytestmark = pytest.mark.django_db(transaction=True)

BLOCKED = "甲乙丙丁戊己庚辛壬癸"  # ten characters: split over 1, 2 and 10 chunks below
BEFORE, AFTER = "食堂今天开到九点。", "后面的话不应出现。"
NOTICE_ZH = "（回答中出现了不适合展示的内容，已停止生成。请换个问法。）"


@pytest.fixture
def word_lists():
    politics = WordList.objects.create(name="涉政", category="涉政", action="block", question=False)
    ListWord.objects.create(word_list=politics, word=BLOCKED)
    ListWord.objects.create(word_list=politics, word="法轮")
    ads = WordList.objects.create(name="广告", category="广告", action="mask", question=False)
    ListWord.objects.create(word_list=ads, word="代考")


def _shown(result) -> str:
    """Everything of the answer a client was sent: chunks, reasoning, tool text, done."""
    parts = [f.get("content", "") for f in result.frames if f["type"] in ("chunk", "reasoning", "tool_chunk")]
    return "".join(parts) + result.frames[-1]["full_text"]


def _never_shown(text: str, word: str) -> bool:
    flat = normalised(text)[0]
    return word not in flat and not any(flat.endswith(word[:n]) for n in range(1, len(word)))


@pytest.mark.parametrize("chunk_size", [len(BEFORE + BLOCKED + AFTER), 5, 1])  # the word in 1, 2, 10 chunks
def test_a_blocked_word_in_the_answer_never_reaches_the_client_and_ends_the_reply(
    live_asgi, llm_settings, agent, auth_headers, word_lists, chunk_size
):
    llm_settings.reply_text(BEFORE + BLOCKED + AFTER, chunk_size=chunk_size)
    result = chat(live_asgi, {"message": "食堂开到几点"}, headers=auth_headers)

    assert _never_shown(_shown(result), BLOCKED) and "后面" not in _shown(result)
    assert result.of("moderation") == [{"type": "moderation", "stage": "answer", "action": "block", "category": "涉政"}]
    done = result.frames[-1]
    assert done["interrupted"] is True and done["interrupted_reason"] == "content_filter"
    assert result.text.endswith(NOTICE_ZH) and done["full_text"] == result.text
    reply = Message.objects.get(id=done["message_id"])
    assert reply.content == result.text and BLOCKED not in reply.content
    assert reply.meta["moderation"] == [{"stage": "answer", "action": "block", "category": "涉政"}]
    assert reply.meta["interrupted"] is True
    # The audit keeps what was stopped; nothing else does.
    (row,) = AuditEvent.objects.filter(event=AuditEvent.Event.MODERATION_HIT)
    assert row.outcome == "refused" and row.details["stage"] == "answer" and BLOCKED in row.details["held"]
    assert row.target == f"message:{done['message_id']}"

    # Never sent back to the model: the next turn's history holds the reply as shown.
    llm_settings.reply_text("好的。")
    chat(live_asgi, {"message": "那明天呢", "conversation_id": result.frames[0]["conversation_id"]},
         headers=auth_headers)
    assert BLOCKED[:2] not in json.dumps(llm_settings.last_request.messages, ensure_ascii=False)


def test_the_model_stream_is_stopped_at_the_blocked_word(live_asgi, llm_settings, agent, auth_headers, word_lists):
    # The model would go on for a long time; the run ends at the word, not when the model does.
    llm_settings.reply_text(BEFORE + "法 轮" + "很长的后文" * 200, chunk_size=2, chunk_delay=0.02)
    result = chat(live_asgi, {"message": "你好"}, headers=auth_headers, timeout=10)
    assert result.frames[-1]["interrupted_reason"] == "content_filter"
    assert "后文" not in _shown(result) and "轮" not in _shown(result)


def test_a_blocked_word_in_the_reasoning_ends_the_reply_too(live_asgi, llm_settings, agent, auth_headers, word_lists):
    llm_settings.queue(Reply(reasoning="我想想" + BLOCKED + "然后", text="答案", chunk_size=3))
    result = chat(live_asgi, {"message": "你好"}, headers=auth_headers)
    assert _never_shown(_shown(result), BLOCKED) and "答案" not in result.text
    assert result.of("moderation")[0]["stage"] == "reasoning"
    assert result.frames[-1]["interrupted_reason"] == "content_filter"
    reply = Message.objects.get(id=result.frames[-1]["message_id"])
    assert BLOCKED[:2] not in json.dumps(reply.meta, ensure_ascii=False)


def test_a_masked_word_is_masked_in_what_is_shown_stored_and_sent_back(
    live_asgi, llm_settings, agent, auth_headers, word_lists
):
    # Round one says the word before calling a tool (sent back with the call), round two again.
    llm_settings.reply_tool_calls(("call_canteen", {"message": "查询"}), text="有人找代 考，我查一下。", chunk_size=1)
    llm_settings.reply_text("别找ｄai代考的人，代考违规。", chunk_size=2)
    result = chat(live_asgi, {"message": "代考怎么样"}, headers=auth_headers)

    assert "代考" not in normalised(_shown(result))[0]
    assert result.text == "有人找***，我查一下。别找ｄai**的人，**违规。"
    assert result.of("moderation") == [{"type": "moderation", "stage": "answer", "action": "mask", "category": "广告"}]
    round_two = llm_settings.last_request.messages
    assert "代考" not in json.dumps([m for m in round_two if m["role"] != "user"], ensure_ascii=False)
    assert any(m.get("content") == "有人找***，我查一下。" for m in round_two if m["role"] == "assistant")
    stored = Message.objects.filter(role=Message.Role.ASSISTANT)
    assert "代考" not in "".join(m.content for m in stored)
    assert AuditEvent.objects.filter(event=AuditEvent.Event.MODERATION_HIT, outcome="ok").count() == 1


def test_a_tools_live_text_is_checked_and_a_blocked_one_left_out(
    live_asgi, llm_settings, agent, auth_headers, word_lists, subagent_server
):
    # The contract sub-agent echoes the message it was sent in its own streamed text; the
    # model's arguments are masked, the sub-agent adds the blocked word itself.
    subagent_server.raw_bodies["k1"] = [
        'data: {"type": "chunk", "content": "代"}\n\n', 'data: {"type": "chunk", "content": "考 和 法"}\n\n',
        'data: {"type": "chunk", "content": "轮"}\n\n', 'data: {"type": "done", "full_text": "代考 和 法轮"}\n\n',
    ]
    llm_settings.reply_tool_calls(("call_canteen", {"message": "[[mode:raw]]k1"}))
    llm_settings.reply_text("没有查到可以说的。")
    result = chat(live_asgi, {"message": "查一下"}, headers=auth_headers)

    tool_text = "".join(f["content"] for f in result.of("tool_chunk"))
    assert "法" not in tool_text and "代考" not in tool_text
    (failed,) = result.of("tool_result")
    assert failed["ok"] is False and failed["error"] == str(TOOL_TEXT_BLOCKED_TEXT)
    assert {"type": "moderation", "stage": "answer", "action": "block", "category": "涉政"} in result.of("moderation")
    # The model and the stored tool row get the notice, not the tool's words; the turn goes on.
    sent = json.dumps(llm_settings.last_request.messages, ensure_ascii=False)
    assert "法轮" not in sent and "代考" not in sent
    tool_row = Message.objects.get(role=Message.Role.TOOL)
    assert "法轮" not in tool_row.content and tool_row.meta["ok"] is False
    assert result.text == "没有查到可以说的。" and not result.frames[-1].get("interrupted")


def test_a_tools_masked_words_are_masked_in_its_text_and_result(
    live_asgi, llm_settings, agent, auth_headers, word_lists, subagent_server
):
    llm_settings.reply_tool_calls(("call_canteen", {"message": "代考服务"}))
    llm_settings.reply_text("好的。")
    result = chat(live_asgi, {"message": "查一下"}, headers=auth_headers)
    tool_text = "".join(f["content"] for f in result.of("tool_chunk"))
    assert "**服务" in tool_text and "代考" not in tool_text
    assert "代考" not in Message.objects.get(role=Message.Role.TOOL).content
    assert "代考" not in json.dumps(llm_settings.last_request.messages, ensure_ascii=False)


def test_the_notice_is_in_the_students_language(live_asgi, llm_settings, agent, auth_headers, word_lists):
    llm_settings.reply_text(BEFORE + BLOCKED)
    result = chat(live_asgi, {"message": "hi"}, headers={**auth_headers, "Accept-Language": "en"})
    notice = result.text[len(BEFORE):].strip()
    assert notice and notice.isascii() and str(ANSWER_BLOCKED_TEXT) == NOTICE_ZH


def test_v1_clients_never_get_a_blocked_word(live_asgi, llm_settings, agent, user, word_lists):
    key = api_key_create(user=user, name="Chatbox")[1]
    llm_settings.reply_text(BEFORE + BLOCKED + AFTER, chunk_size=1)
    llm_settings.reply_text(BEFORE + BLOCKED + AFTER, chunk_size=3)
    with openai.OpenAI(base_url=f"{live_asgi}/v1", api_key=key, max_retries=0, timeout=20) as sdk:
        chunks = list(sdk.chat.completions.create(model="xiaozhi", stream=True,
                                                  messages=[{"role": "user", "content": "你好"}]))
        whole = sdk.chat.completions.create(model="xiaozhi", messages=[{"role": "user", "content": "你好"}])
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert _never_shown(streamed, BLOCKED) and streamed.startswith(BEFORE) and streamed.endswith(NOTICE_ZH)
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == [
        "content_filter"
    ]
    assert _never_shown(whole.choices[0].message.content, BLOCKED)
    assert whole.choices[0].finish_reason == "content_filter"


async def test_mcp_clients_never_get_a_blocked_word(live_asgi, llm_settings, agent, user_token, word_lists):
    llm_settings.reply_text(BEFORE + BLOCKED + AFTER, chunk_size=2)
    async with mcp_session(live_asgi, user_token) as session:
        result = await session.call_tool("ask_xiaozhi", {"message": "你好", "conversation_id": None})
    text = "".join(c.text for c in result.content)
    assert _never_shown(text, BLOCKED) and NOTICE_ZH in text


def test_a2a_clients_never_get_a_blocked_word(live_asgi, llm_settings, agent, user, word_lists):
    key = api_key_create(user=user, name="A2A 客户端")[1]
    llm_settings.reply_text(BEFORE + BLOCKED + AFTER, chunk_size=2)
    (event,) = _send(live_asgi, {"Authorization": f"Bearer {key}"}, _question("你好"))
    text = "".join(get_artifact_text(a) for a in event.task.artifacts)
    assert _never_shown(text, BLOCKED) and NOTICE_ZH in text


def test_a_tool_calls_arguments_are_the_models_words_too(
    live_asgi, llm_settings, agent, auth_headers, word_lists, subagent_server
):
    llm_settings.reply_tool_calls(("call_canteen", {"message": "查" + BLOCKED}), text="我查一下。")
    result = chat(live_asgi, {"message": "查一下"}, headers=auth_headers)
    assert "tool_call" not in result.types and subagent_server.requests == []
    assert _never_shown(json.dumps(result.frames, ensure_ascii=False), BLOCKED)
    assert result.frames[-1]["interrupted_reason"] == "content_filter"

    llm_settings.reply_tool_calls(("call_canteen", {"message": "代考"}))
    llm_settings.reply_text("好的。")
    result = chat(live_asgi, {"message": "查一下"}, headers=auth_headers)
    (call,) = result.of("tool_call")
    assert json.loads(call["args"]) == {"message": "**"} and subagent_server.last_request.message == "**"


def test_a_list_of_100000_words_checks_the_question_and_the_streamed_answer(live_asgi, llm_settings, agent,
                                                                             auth_headers):
    from bench.moderation import word_list

    words = word_list(100_000)
    listed = WordList.objects.create(name="采购词库", category="违规", action="block")
    ListWord.objects.bulk_create([ListWord(word_list=listed, word=w) for w in words], batch_size=5000)
    hidden = words[77_777]
    pieces = [hidden[:1], *hidden[1:]]  # one character a chunk

    llm_settings.queue(Reply(text="好的，" + "".join(pieces) + "。", chunk_size=1))
    answer = chat(live_asgi, {"message": "你好"}, headers=auth_headers, timeout=30)
    assert _never_shown(_shown(answer), hidden)
    assert answer.of("moderation")[0]["category"] == "违规"

    question = chat(live_asgi, {"message": f"请问 {' '.join(hidden)} 是什么"}, headers=auth_headers)
    assert question.of("moderation")[0]["stage"] == "question" and len(llm_settings.requests) == 1


# --- the moderation model on the answer ---------------------------------------------------------
FIRST = "一食堂今天中午供应红烧肉和番茄炒蛋，价格都不贵。"  # 24 characters: one segment
SECOND = "二食堂的第二句话被审核模型判定为违规内容了。"
THIRD = "第三句话不应该出现在任何地方。"


def test_the_moderation_model_passes_the_answer_segment_by_segment_before_it_is_shown(
    live_asgi, llm_settings, agent, auth_headers, moderation_model_factory, moderation_server
):
    moderation_model_factory(question=False, answer=True)
    moderation_server.pass_().flag("violence")
    llm_settings.reply_text(FIRST + SECOND + THIRD, chunk_size=3)

    result = chat(live_asgi, {"message": "食堂吃什么"}, headers=auth_headers)

    chunks = [f["content"] for f in result.of("chunk")]
    assert chunks[0] == FIRST  # nothing of a segment is shown before the model passed it whole
    assert SECOND[:3] not in _shown(result) and THIRD[:3] not in _shown(result)
    assert result.of("moderation") == [{"type": "moderation", "stage": "answer", "action": "block",
                                        "category": "violence"}]
    assert result.frames[-1]["interrupted_reason"] == "content_filter" and result.text.endswith(NOTICE_ZH)
    asked = [r.body["input"] for r in moderation_server.requests]
    assert asked[0] == FIRST and asked[1].endswith(SECOND) and FIRST[-10:] in asked[1]  # with the context before
    (row,) = AuditEvent.objects.filter(event=AuditEvent.Event.MODERATION_HIT)
    assert SECOND in row.details["held"]


@pytest.mark.parametrize("fail_mode", ["open", "closed"])
def test_a_hanging_moderation_model_lets_the_answer_through_or_stops_it_by_its_mode(
    live_asgi, llm_settings, agent, auth_headers, moderation_model_factory, moderation_server, fail_mode
):
    moderation_model_factory(question=False, answer=True, fail_mode=fail_mode, timeout_sec=1)
    moderation_server.hang()
    llm_settings.reply_text(FIRST)
    result = chat(live_asgi, {"message": "食堂吃什么"}, headers=auth_headers)
    if fail_mode == "open":
        assert result.text == FIRST and not result.of("moderation")
    else:
        assert FIRST[:3] not in _shown(result) and result.text == NOTICE_ZH
        assert result.of("moderation")[0]["category"] == "审核模型"


def test_without_a_model_on_the_answer_nothing_waits_for_one(
    live_asgi, llm_settings, agent, auth_headers, moderation_model_factory, moderation_server
):
    moderation_model_factory()  # the question only
    llm_settings.reply_text(FIRST + SECOND, chunk_size=3, chunk_delay=0.05)
    result = chat(live_asgi, {"message": "食堂吃什么"}, headers=auth_headers)
    assert result.text == FIRST + SECOND and result.of("chunk")[0]["content"] == FIRST[:3]
    assert [r.body["input"] for r in moderation_server.requests] == ["食堂吃什么"]


def test_a_long_piece_is_checked_in_segments_of_at_most_300_characters(
    live_asgi, llm_settings, agent, auth_headers, moderation_model_factory, moderation_server
):
    moderation_model_factory(question=False, answer=True)
    text = "长" * 700  # one chunk, no sentence end
    llm_settings.reply_text(text, chunk_size=700)
    result = chat(live_asgi, {"message": "你好"}, headers=auth_headers)
    assert result.text == text
    segments = [r.body["input"] for r in moderation_server.requests]
    assert len(segments) == 3 and all(len(s) <= 300 + 100 for s in segments)
