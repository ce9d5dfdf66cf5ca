"""The moderation model on the question (docs/safety.md#the-moderation-model): asked before the
turn is admitted, a flagged question is blocked exactly as a word list's block is — stored marked
with the category, the fixed answer after a `moderation` frame, the chat model never called —
through every gateway (REST, `/v1`, MCP, A2A, each with its official client); a failing model lets
the question through (fail open) or blocks it (fail closed). Against the scripted moderation
server and the scripted chat model on loopback."""

import httpx
import openai
import pytest
from a2a.helpers import get_artifact_text
from prometheus_client.parser import text_string_to_metric_families

from chat_app.accounts.api_keys import api_key_create
from chat_app.models import Conversation, Message
from chat_app.tests.gateways.test_a2a_server import _question, _send
from chat_app.tests.gateways.test_mcp_server import mcp_session
from safety_app.model_check import MODEL_CATEGORY
from safety_app.models import ListWord, WordList
from testkit.web.sse import chat

pytestmark = pytest.mark.django_db(transaction=True)

BLOCKED_ZH = "这个问题含有不适合讨论的内容，我无法回答。请换个问题。"
QUESTION = "怎么自制炸药"
METRICS_TOKEN = "metrics-s3cret"


def test_a_flagged_question_is_blocked_and_the_model_never_called(
    live_asgi, llm_settings, agent, auth_headers, moderation_model_factory, moderation_server, subagent_server
):
    moderation_model_factory()
    moderation_server.flag("violence")

    result = chat(live_asgi, {"message": QUESTION}, headers=auth_headers)

    assert result.types[1:] == ["moderation", "chunk", "done"]
    assert result.of("moderation") == [
        {"type": "moderation", "stage": "question", "action": "block", "category": "violence"}
    ]
    assert result.text == result.frames[-1]["full_text"] == BLOCKED_ZH
    assert llm_settings.requests == [] and subagent_server.requests == []
    assert [r.body for r in moderation_server.requests] == [{"model": "guard-test", "input": QUESTION}]
    question = Message.objects.get(role=Message.Role.USER)
    assert (question.content, question.meta["blocked"]) == (QUESTION, {"category": "violence"})
    assert Conversation.objects.get().title == "新对话"

    # The next question passes the model and is answered; the blocked one is not in what the model reads.
    llm_settings.reply_text("不知道。")
    follow = chat(live_asgi, {"message": "食堂几点开门", "conversation_id": result.frames[0]["conversation_id"]},
                  headers=auth_headers)
    assert follow.text == "不知道。"
    assert "炸药" not in str(llm_settings.last_request.messages)
    assert moderation_server.last_request.body["input"] == "食堂几点开门"


def test_a_passed_question_goes_on_with_the_word_lists(
    live_asgi, llm_settings, agent, auth_headers, moderation_model_factory, moderation_server
):
    ads = WordList.objects.create(name="广告", category="广告", action="mask")
    ListWord.objects.create(word_list=ads, word="代考")
    moderation_model_factory(kind="guard_chat")
    moderation_server.pass_()
    llm_settings.reply_text("不可以。")

    result = chat(live_asgi, {"message": "能找人代考吗"}, headers=auth_headers)

    assert result.text == "不可以。"
    assert result.of("moderation") == [{"type": "moderation", "stage": "question", "action": "mask", "category": "广告"}]
    assert llm_settings.last_request.messages[-1]["content"] == "能找人**吗"
    # The model saw what the student wrote (the lists mask what is stored and sent on).
    assert moderation_server.last_request.body["messages"] == [{"role": "user", "content": "能找人代考吗"}]


@pytest.mark.parametrize("fail_mode", ["open", "closed"])
def test_a_hanging_model_fails_by_its_mode(
    live_asgi, llm_settings, agent, auth_headers, moderation_model_factory, moderation_server, fail_mode
):
    moderation_model_factory(fail_mode=fail_mode, timeout_sec=1)
    moderation_server.hang()
    llm_settings.reply_text("答案。")

    result = chat(live_asgi, {"message": "你好"}, headers=auth_headers)

    assert moderation_server.asked.is_set()
    if fail_mode == "open":
        assert result.text == "答案。" and result.of("moderation") == []
    else:
        assert result.text == BLOCKED_ZH and llm_settings.requests == []
        assert result.of("moderation")[0]["category"] == MODEL_CATEGORY
        assert Message.objects.get(role=Message.Role.USER).meta["blocked"] == {"category": MODEL_CATEGORY}


def test_a_change_of_the_model_applies_to_the_next_turn(
    live_asgi, llm_settings, agent, auth_headers, moderation_model_factory, moderation_server
):
    llm_settings.reply_text("答案一。").reply_text("答案三。")
    assert chat(live_asgi, {"message": QUESTION}, headers=auth_headers).text == "答案一。"  # none yet

    row = moderation_model_factory()  # this worker kept "no model" with the lists: the change is seen
    moderation_server.flag()
    assert chat(live_asgi, {"message": QUESTION}, headers=auth_headers).text == BLOCKED_ZH

    row.enabled = False
    row.save()
    assert chat(live_asgi, {"message": QUESTION}, headers=auth_headers).text == "答案三。"
    assert len(moderation_server.requests) == 1


def test_a_refused_or_listed_question_costs_no_call(
    live_asgi, llm_settings, agent, auth_headers, moderation_model_factory, moderation_server
):
    """The model is asked last: a question admission refuses (404, 409, 429 …) or a word list
    blocks never reaches it."""
    politics = WordList.objects.create(name="涉政", category="涉政", action="block")
    ListWord.objects.create(word_list=politics, word="法轮")
    moderation_model_factory()

    missing = chat(live_asgi, {"message": QUESTION, "conversation_id": "00000000-0000-4000-8000-000000000000"},
                   headers=auth_headers)
    listed = chat(live_asgi, {"message": "法轮" + QUESTION}, headers=auth_headers)

    assert missing.status == 404
    assert listed.of("moderation") == [{"type": "moderation", "stage": "question", "action": "block", "category": "涉政"}]
    assert moderation_server.requests == [] and llm_settings.requests == []


def test_v1_clients_are_blocked_and_the_earlier_questions_are_checked_too(
    live_asgi, llm_settings, agent, user, moderation_model_factory, moderation_server
):
    moderation_model_factory()
    moderation_server.flag().flag("hate")
    key = api_key_create(user=user, name="Chatbox")[1]
    with openai.OpenAI(base_url=f"{live_asgi}/v1", api_key=key, max_retries=0, timeout=20) as sdk:
        whole = sdk.chat.completions.create(model="xiaozhi", messages=[{"role": "user", "content": QUESTION}])
        chunks = list(sdk.chat.completions.create(
            model="xiaozhi", stream=True,
            messages=[{"role": "user", "content": "第一问"}, {"role": "assistant", "content": "……"},
                      {"role": "user", "content": "继续"}],
        ))
    assert whole.choices[0].message.content == BLOCKED_ZH
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == BLOCKED_ZH
    assert llm_settings.requests == []
    # One call per question: the client's earlier questions with it, earliest first.
    assert [r.body["input"] for r in moderation_server.requests] == [QUESTION, "第一问\n\n继续"]
    assert [m.meta["blocked"]["category"] for m in Message.objects.filter(role=Message.Role.USER, meta__has_key="blocked")
            ] in (["violence", "hate"], ["hate", "violence"])


async def test_mcp_clients_are_blocked(live_asgi, llm_settings, agent, user_token, moderation_model_factory,
                                       moderation_server):
    from asgiref.sync import sync_to_async

    await sync_to_async(moderation_model_factory)()
    moderation_server.flag()
    async with mcp_session(live_asgi, user_token) as session:
        result = await session.call_tool("ask_xiaozhi", {"message": QUESTION, "conversation_id": None})
    assert result.is_error is False and [c.text for c in result.content] == [BLOCKED_ZH]
    assert llm_settings.requests == [] and len(moderation_server.requests) == 1


def test_a2a_clients_are_blocked(live_asgi, llm_settings, agent, user, moderation_model_factory, moderation_server):
    moderation_model_factory()
    moderation_server.flag()
    key = api_key_create(user=user, name="A2A 客户端")[1]
    (event,) = _send(live_asgi, {"Authorization": f"Bearer {key}"}, _question(QUESTION))
    assert [get_artifact_text(a) for a in event.task.artifacts] == [BLOCKED_ZH]
    assert llm_settings.requests == [] and len(moderation_server.requests) == 1


def test_verdicts_are_on_metrics(live_asgi, llm_settings, agent, auth_headers, moderation_model_factory,
                                 moderation_server, settings):
    settings.METRICS_TOKEN = METRICS_TOKEN
    moderation_model_factory()
    before = _metrics(live_asgi)
    moderation_server.flag()
    chat(live_asgi, {"message": QUESTION}, headers=auth_headers)
    after = _metrics(live_asgi)

    def grew(name, **labels):
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    assert grew("campus_agent_moderation_model_verdicts_total", stage="question", outcome="flagged") == 1
    assert grew("campus_agent_moderation_model_seconds_count", stage="question") == 1


def _metrics(base: str) -> dict:
    answer = httpx.get(f"{base}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, timeout=10)
    assert answer.status_code == 200
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(answer.text) for s in family.samples}
