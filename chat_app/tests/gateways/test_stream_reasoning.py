"""A thinking model through POST /api/v1/chat (docs/design.md#the-chat-stream `reasoning` frame; docs/design.md#the-tool-loop, thinking models):
each of the three forms streams as `reasoning` frames, is kept on the assistant row's
`meta.reasoning`, and never reaches the reply's text, `done.full_text`, the title or the content
sent back to the model. The one exception the providers require: a round that called tools has its
reasoning sent back as `reasoning_content` on that assistant message, in the turn and in every
later history (DeepSeek V4 refuses the request otherwise), unless its provider is set not to.
(The streams exactly as each provider sends them: test_provider_streams.py.)"""
import json

import pytest

from chat_app.models import Conversation, Message
from testkit.model.fake_llm import Reply, ScriptedCall
from testkit.web.sse import chat

pytestmark = pytest.mark.django_db(transaction=True)

FORMS = ["reasoning_content", "reasoning", "think"]
REASONING = "学生问食堂。先想想：二食堂晚上有红烧肉，价格 12 元。"
ANSWER = "二食堂今晚有红烧肉，12 元。"


def _reasoning(result) -> str:
    return "".join(f["content"] for f in result.of("reasoning"))


def _rows(conversation_id) -> list[Message]:
    return list(Message.objects.filter(conversation_id=conversation_id).order_by("created_at", "seq"))


def _nothing_of_the_reasoning_in(messages: list[dict]) -> None:
    sent = json.dumps(messages, ensure_ascii=False)
    assert "红烧肉，价格" not in sent and "<think>" not in sent and "reasoning" not in sent


@pytest.mark.parametrize("form", FORMS)
def test_reasoning_is_apart_from_the_answer_stored_and_never_sent_back(live_asgi, llm_settings, agent,
                                                                        auth_headers, form):
    llm_settings.queue(Reply(reasoning=REASONING, reasoning_as=form, text=ANSWER, chunk_size=3))
    result = chat(live_asgi, {"message": "今晚吃什么"}, headers=auth_headers)

    assert _reasoning(result) == REASONING
    types = [t for t in result.types if t in ("reasoning", "chunk")]
    assert types.index("chunk") > max(i for i, t in enumerate(types) if t == "reasoning")  # thinking first
    done = result.frames[-1]
    assert result.text == done["full_text"] == ANSWER
    conversation = Conversation.objects.get(id=result.frames[0]["conversation_id"])
    assert conversation.title == "今晚吃什么"
    _, reply = _rows(conversation.id)
    assert reply.content == ANSWER and reply.meta["reasoning"] == REASONING

    llm_settings.reply_text("不客气。")
    chat(live_asgi, {"message": "谢谢", "conversation_id": str(conversation.id)}, headers=auth_headers)
    history = llm_settings.last_request.messages
    assert {"role": "assistant", "content": ANSWER} in history
    _nothing_of_the_reasoning_in(history)


def test_reasoning_before_tool_calls_stays_with_its_round(live_asgi, llm_settings, agent, auth_headers,
                                                          subagent_server):
    llm_settings.queue(
        Reply(reasoning="要查食堂，调用 call_canteen。", reasoning_as="think",
              tool_calls=[ScriptedCall("call_canteen", {"message": "今晚菜单"})]),
        Reply(reasoning="菜单里有红烧肉。", text=ANSWER),
    )
    result = chat(live_asgi, {"message": "今晚吃什么"}, headers=auth_headers)

    assert _reasoning(result) == "要查食堂，调用 call_canteen。菜单里有红烧肉。"
    assert result.types.index("tool_call") < [i for i, f in enumerate(result.frames)
                                              if f["type"] == "reasoning" and f["content"].startswith("菜单")][0]
    assert result.frames[-1]["full_text"] == ANSWER
    _, calls_row, tool_row, reply = _rows(result.frames[0]["conversation_id"])
    assert calls_row.meta["reasoning"] == "要查食堂，调用 call_canteen。" and calls_row.content == ""
    assert tool_row.role == "tool"
    assert reply.meta["reasoning"] == "菜单里有红烧肉。" and reply.content == ANSWER
    # The request after the tool round: the round's reasoning with its calls, never as content.
    history = llm_settings.last_request.messages
    assert [m.get("reasoning_content") for m in history if m.get("tool_calls")] == ["要查食堂，调用 call_canteen。"]
    assert "要查食堂" not in json.dumps([m.get("content") for m in history], ensure_ascii=False)


TOOL_ROUND_REASONING = "学生问食堂，得先查今晚的菜单：调用 call_canteen。"
ANSWER_REASONING = "菜单里有红烧肉，12 元。"


def _tool_round_then_answer(llm_settings) -> None:
    llm_settings.queue(
        Reply(reasoning=TOOL_ROUND_REASONING, tool_calls=[ScriptedCall("call_canteen", {"message": "今晚菜单"})]),
        Reply(reasoning=ANSWER_REASONING, text=ANSWER),
    )


def test_deepseek_thinking_mode_gets_a_tool_rounds_reasoning_back_in_the_turn_and_every_later_turn(
    live_asgi, llm_settings, agent, auth_headers, subagent_server
):
    """DeepSeek V4's thinking mode answers HTTP 400 "The `reasoning_content` in the thinking mode
    must be passed back to the API." to a request whose tool round lost its reasoning: the scripted
    model refuses exactly so (requires_reasoning_back), and neither the turn nor the next fails."""
    llm_settings.requires_reasoning_back = True
    _tool_round_then_answer(llm_settings)
    first = chat(live_asgi, {"message": "今晚吃什么"}, headers=auth_headers)
    assert first.of("error") == [] and first.frames[-1]["full_text"] == ANSWER
    assert "interrupted" not in first.frames[-1]
    round_message = next(m for m in llm_settings.requests[1].messages if m.get("tool_calls"))
    assert (round_message["reasoning_content"], round_message["content"]) == (TOOL_ROUND_REASONING, None)

    llm_settings.reply_text("不客气。")
    second = chat(live_asgi, {"message": "谢谢", "conversation_id": first.frames[0]["conversation_id"]},
                  headers=auth_headers)
    assert second.of("error") == [] and second.text == "不客气。"
    history = llm_settings.last_request.messages
    assert [m.get("reasoning_content") for m in history if m.get("tool_calls")] == [TOOL_ROUND_REASONING]
    assert {"role": "assistant", "content": ANSWER} in history  # a round without calls: its reasoning stays here
    assert ANSWER_REASONING not in json.dumps(history, ensure_ascii=False)


def test_a_tool_round_without_reasoning_gets_an_empty_one_once_any_round_has_it(live_asgi, llm_settings, agent,
                                                                                auth_headers, subagent_server):
    """A thinking model may call tools without a word of reasoning in one round: with the other
    rounds' reasoning going back, that round carries an empty `reasoning_content`, as DeepSeek's
    thinking mode wants the field on every tool round."""
    llm_settings.requires_reasoning_back = True
    llm_settings.queue(
        Reply(reasoning=TOOL_ROUND_REASONING, tool_calls=[ScriptedCall("call_canteen", {"message": "今晚菜单"})]),
        Reply(tool_calls=[ScriptedCall("call_canteen", {"message": "明早菜单"})]),
        Reply(text=ANSWER),
    )
    result = chat(live_asgi, {"message": "今晚和明早吃什么"}, headers=auth_headers)
    assert result.of("error") == [] and result.text == ANSWER
    rounds = [m["reasoning_content"] for m in llm_settings.last_request.messages if m.get("tool_calls")]
    assert rounds == [TOOL_ROUND_REASONING, ""]


def test_a_provider_set_not_to_receive_reasoning_is_sent_none(live_asgi, llm_settings, agent, auth_headers,
                                                               subagent_server, provider_factory):
    agent.provider = provider_factory(name="不收思考", base_url=llm_settings.url, reasoning_back=False)
    agent.save()
    _tool_round_then_answer(llm_settings)
    result = chat(live_asgi, {"message": "今晚吃什么"}, headers=auth_headers)
    assert result.frames[-1]["full_text"] == ANSWER
    _nothing_of_the_reasoning_in(llm_settings.last_request.messages)


def test_an_unclosed_think_block_is_all_reasoning(live_asgi, llm_settings, agent, auth_headers):
    llm_settings.queue(Reply(text="<think>想到一半就停了", chunk_size=2))
    result = chat(live_asgi, {"message": "你好"}, headers=auth_headers)
    assert _reasoning(result) == "想到一半就停了"
    assert result.text == result.frames[-1]["full_text"] == ""
    reply = _rows(result.frames[0]["conversation_id"])[-1]
    assert reply.content == "" and reply.meta["reasoning"] == "想到一半就停了"


def test_a_reply_stored_with_its_think_block_goes_back_without_it(live_asgi, llm_settings, agent, auth_headers,
                                                                  user):
    """Rows stored before reasoning was kept apart carry the raw block."""
    conversation = Conversation.objects.create(user=user, agent=agent, title="旧对话")
    Message.objects.create(conversation=conversation, role="user", content="你好", seq=1)
    Message.objects.create(conversation=conversation, role="assistant", content="<think>旧的推理</think>\n\n你好！", seq=2)
    llm_settings.reply_text("在的。")
    chat(live_asgi, {"message": "在吗", "conversation_id": str(conversation.id)}, headers=auth_headers)
    assert {"role": "assistant", "content": "你好！"} in llm_settings.last_request.messages


def test_reasoning_counts_against_the_reply_cap(live_asgi, llm_settings, agent, auth_headers, settings):
    settings.LLM_MAX_REPLY_BYTES = 300
    llm_settings.queue(Reply(reasoning="想" * 400, text="答", chunk_size=50))
    result = chat(live_asgi, {"message": "你好"}, headers=auth_headers)
    assert result.frames[-1]["interrupted"] is True
    assert len(_reasoning(result).encode()) <= 300


def test_reasoning_tokens_and_deepseeks_cache_hits_are_counted(live_asgi, llm_settings, agent, auth_headers):
    usage = {"prompt_tokens": 40, "completion_tokens": 30, "total_tokens": 70, "prompt_cache_hit_tokens": 32,
             "prompt_cache_miss_tokens": 8, "completion_tokens_details": {"reasoning_tokens": 21}}
    llm_settings.queue(Reply(reasoning=REASONING, text=ANSWER, usage=usage))
    result = chat(live_asgi, {"message": "今晚吃什么"}, headers=auth_headers)
    reply = _rows(result.frames[0]["conversation_id"])[-1]
    assert reply.meta["usage"]["prompt_tokens_details"] == {"cached_tokens": 32}
    assert reply.meta["usage"]["completion_tokens_details"] == {"reasoning_tokens": 21}
    assert (reply.prompt_tokens, reply.completion_tokens, reply.cached_tokens) == (40, 30, 32)
