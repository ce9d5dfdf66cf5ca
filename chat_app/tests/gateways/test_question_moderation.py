"""A question with a `block` word of the lists never reaches the model nor a tool: it is stored
marked, answered with a fixed message in the student's language and a `moderation` frame, and
later turns do not send it to the model; a `mask` word is masked in what is stored and sent
(chat_app/runs/moderation.py, docs/design.md#content-safety-and-labels). Through every gateway (REST,
`/v1`, MCP, A2A, each with its official client), against the scripted model server."""

import openai
import pytest
from a2a.helpers import get_artifact_text
from loguru import logger

from chat_app.accounts.api_keys import api_key_create
from chat_app.models import Conversation, Message
from chat_app.runs.moderation import MSG_QUESTION_BLOCKED
from chat_app.tests.gateways.test_a2a_server import _question, _send
from chat_app.tests.gateways.test_mcp_server import mcp_session
from safety_app.models import ListWord, WordList
from testkit.web.sse import chat

pytestmark = pytest.mark.django_db(transaction=True)

BLOCKED_ZH = "这个问题含有不适合讨论的内容，我无法回答。请换个问题。"


@pytest.fixture
def word_lists():
    politics = WordList.objects.create(name="涉政", category="涉政", action="block", answer=False)
    ListWord.objects.create(word_list=politics, word="法轮")
    ads = WordList.objects.create(name="广告", category="广告", action="mask")
    ListWord.objects.create(word_list=ads, word="代考")


def test_a_blocked_question_reaches_neither_model_nor_tool(
    live_asgi, llm_settings, agent, auth_headers, word_lists, subagent_server
):
    result = chat(live_asgi, {"message": "食堂 法 . 轮 今天开吗"}, headers=auth_headers)

    assert result.types[1:] == ["moderation", "chunk", "done"]
    assert result.of("moderation") == [
        {"type": "moderation", "stage": "question", "action": "block", "category": "涉政"}
    ]
    assert result.text == result.frames[-1]["full_text"] == BLOCKED_ZH
    assert llm_settings.requests == [] and subagent_server.requests == []
    question = Message.objects.get(role=Message.Role.USER)
    assert question.meta["blocked"] == {"category": "涉政"}
    assert Conversation.objects.get().title == "新对话"  # no title made of the listed words
    assert Message.objects.get(id=result.frames[-1]["message_id"]).content == BLOCKED_ZH

    # The next question of the conversation is answered; the blocked turn is not in what the model reads.
    llm_settings.reply_text("开的。")
    chat(
        live_asgi,
        {"message": "食堂今天开吗", "conversation_id": result.frames[0]["conversation_id"]},
        headers=auth_headers,
    )
    sent = str(llm_settings.last_request.messages)
    assert "轮" not in sent and BLOCKED_ZH not in sent


def test_the_log_keeps_no_listed_word(live_asgi, llm_settings, agent, auth_headers, word_lists):
    lines = []
    sink = logger.add(lambda message: lines.append(str(message)), level="DEBUG")
    try:
        llm_settings.reply_text("不可以。")
        chat(live_asgi, {"message": "能找人代考吗"}, headers=auth_headers)
        chat(live_asgi, {"message": "法轮今天开吗"}, headers=auth_headers)
    finally:
        logger.remove(sink)
    assert sum("chat turn start" in line for line in lines) == 2
    assert not [line for line in lines if "代考" in line or "法轮" in line]


def test_the_fixed_answer_is_in_the_students_language(live_asgi, llm_settings, agent, auth_headers, word_lists):
    result = chat(live_asgi, {"message": "法轮"}, headers={**auth_headers, "Accept-Language": "en"})
    assert result.text != BLOCKED_ZH and result.text.isascii() and result.text
    assert llm_settings.requests == []


def test_a_masked_question_is_stored_and_sent_masked(live_asgi, llm_settings, agent, auth_headers, word_lists):
    llm_settings.reply_text("不可以。")
    result = chat(live_asgi, {"message": "能找人代 考吗"}, headers=auth_headers)

    assert result.of("moderation") == [
        {"type": "moderation", "stage": "question", "action": "mask", "category": "广告"}
    ]
    assert result.text == "不可以。"
    assert Message.objects.get(role=Message.Role.USER).content == "能找人***吗"
    assert llm_settings.last_request.messages[-1]["content"] == "能找人***吗"


def test_v1_clients_get_the_fixed_answer_and_the_model_no_request(live_asgi, llm_settings, agent, user, word_lists):
    key = api_key_create(user=user, name="Chatbox")[1]
    with openai.OpenAI(base_url=f"{live_asgi}/v1", api_key=key, max_retries=0, timeout=20) as sdk:
        whole = sdk.chat.completions.create(model="xiaozhi", messages=[{"role": "user", "content": "ＦＡ法轮"}])
        chunks = list(
            sdk.chat.completions.create(
                model="xiaozhi",
                stream=True,
                messages=[
                    {"role": "user", "content": "你好"},
                    {"role": "assistant", "content": "你好！"},
                    {"role": "user", "content": "说说法轮"},
                ],
            )
        )
        # A blocked word in the client's earlier question blocks too: that text would reach the model.
        earlier = sdk.chat.completions.create(
            model="xiaozhi",
            messages=[
                {"role": "user", "content": "法-轮是什么"},
                {"role": "assistant", "content": "……"},
                {"role": "user", "content": "继续"},
            ],
        )
    assert whole.choices[0].message.content == BLOCKED_ZH
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == BLOCKED_ZH
    assert earlier.choices[0].message.content == BLOCKED_ZH
    assert llm_settings.requests == []
    assert str(MSG_QUESTION_BLOCKED) == BLOCKED_ZH


async def test_mcp_clients_get_the_fixed_answer_and_the_model_no_request(
    live_asgi, llm_settings, agent, user_token, word_lists
):
    async with mcp_session(live_asgi, user_token) as session:
        result = await session.call_tool("ask_xiaozhi", {"message": "法 轮", "conversation_id": None})
    assert result.is_error is False and [c.text for c in result.content] == [BLOCKED_ZH]
    assert llm_settings.requests == []


def test_a2a_clients_get_the_fixed_answer_and_the_model_no_request(live_asgi, llm_settings, agent, user, word_lists):
    key = api_key_create(user=user, name="A2A 客户端")[1]
    (event,) = _send(live_asgi, {"Authorization": f"Bearer {key}"}, _question("ＦＯＯ法轮"))
    assert [get_artifact_text(a) for a in event.task.artifacts] == [BLOCKED_ZH]
    assert llm_settings.requests == []
