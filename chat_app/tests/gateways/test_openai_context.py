"""The OpenAI-compatible API keeps the client's context (docs/design.md#other-clients,
docs/clients.md "The conversation"): a history that continues no stored conversation — a chat
edited, branched or started elsewhere — opens a new one with the client's own user / assistant
text messages (capped in count and bytes, stored marked `meta.from_client`), the model sees them,
and the client's next request continues that conversation. Through the official `openai` client."""
import openai
import pytest

from chat_app.accounts.api_keys import api_key_create
from chat_app.models import Conversation, Message

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.embedded]  # a JSON lookup (meta.from_client)


@pytest.fixture
def client(live_asgi, user) -> openai.OpenAI:
    key = api_key_create(user=user, name="Cherry Studio")[1]
    with openai.OpenAI(base_url=f"{live_asgi}/v1", api_key=key, max_retries=0, timeout=20) as sdk:
        yield sdk


def _ask(client, messages: list[dict]):
    raw = client.chat.completions.with_raw_response.create(model="xiaozhi", messages=messages)
    return raw.headers["x-conversation-id"], raw.parse().choices[0].message.content


def _rows(conversation_id) -> list[tuple[str, str, bool]]:
    return [(m.role, m.content, m.meta.get("from_client") is True)
            for m in Message.objects.filter(conversation_id=conversation_id).order_by("created_at", "seq")]


def test_a_history_from_elsewhere_is_remembered_and_continued(client, llm_settings, agent):
    history = [
        {"role": "system", "content": "你是一个海盗。"},  # the client's own prompt: never used
        {"role": "user", "content": "我叫张三，是计算机学院的。"},
        {"role": "assistant", "content": "你好张三！"},
        {"role": "tool", "tool_call_id": "call_1", "content": "客户端自己的工具结果"},  # never used
        {"role": "user", "content": "我叫什么？"},
    ]
    llm_settings.reply_text("你叫张三。")
    conversation_id, answer = _ask(client, history)

    assert answer == "你叫张三。"
    assert llm_settings.last_request.messages[1:] == [
        {"role": "user", "content": "我叫张三，是计算机学院的。"}, {"role": "assistant", "content": "你好张三！"},
        {"role": "user", "content": "我叫什么？"}]
    assert "海盗" not in str(llm_settings.last_request.messages) and "客户端自己的工具" not in str(
        llm_settings.last_request.messages)
    assert _rows(conversation_id) == [("user", "我叫张三，是计算机学院的。", True), ("assistant", "你好张三！", True),
                                      ("user", "我叫什么？", False), ("assistant", "你叫张三。", False)]
    assert Conversation.objects.get(id=conversation_id).title.startswith("我叫张三")

    # The client goes on with the same chat: the same conversation, from the stored history.
    llm_settings.reply_text("计算机学院。")
    again, _ = _ask(client, [*history, {"role": "assistant", "content": answer},
                             {"role": "user", "content": "我是哪个学院的？"}])
    assert again == conversation_id and Conversation.objects.count() == 1
    assert [m["content"] for m in llm_settings.last_request.messages[1:]] == [
        "我叫张三，是计算机学院的。", "你好张三！", "我叫什么？", "你叫张三。", "我是哪个学院的？"]


def test_a_branch_edited_in_the_client_opens_a_conversation_of_its_own(client, llm_settings, agent):
    llm_settings.reply_text("一食堂。")
    first, _ = _ask(client, [{"role": "user", "content": "哪个食堂最近？"}])
    llm_settings.reply_text("红烧肉。")
    _ask(client, [{"role": "user", "content": "哪个食堂最近？"}, {"role": "assistant", "content": "一食堂。"},
                  {"role": "user", "content": "有什么菜？"}])

    # The student edits the first question in the client and asks on from there.
    llm_settings.reply_text("二食堂有面。")
    branch, _ = _ask(client, [{"role": "user", "content": "哪个食堂最便宜？"},
                              {"role": "assistant", "content": "二食堂。"},
                              {"role": "user", "content": "有什么菜？"}])
    assert branch != first
    assert [m["content"] for m in llm_settings.last_request.messages[1:]] == [
        "哪个食堂最便宜？", "二食堂。", "有什么菜？"]
    assert [r[1] for r in _rows(first)] == ["哪个食堂最近？", "一食堂。", "有什么菜？", "红烧肉。"]  # untouched


def test_a_long_history_opens_with_its_latest_messages_within_the_caps(client, llm_settings, agent, settings):
    settings.OPENAI_API_OPENING_MAX = 6
    settings.OPENAI_API_OPENING_BYTES_MAX = 4000
    history = []
    for i in range(30):
        history += [{"role": "user", "content": f"第 {i} 个问题"}, {"role": "assistant", "content": f"第 {i} 个回答"}]
    long_answer = "很长的回答。" * 400  # 7200 bytes: its beginning is kept
    history[-1]["content"] = long_answer
    llm_settings.reply_text("好的。")
    conversation_id, _ = _ask(client, [*history, {"role": "user", "content": "总结一下"}])

    opening = [(role, text) for role, text, from_client in _rows(conversation_id) if from_client]
    assert [role for role, _ in opening] == ["user", "assistant"] * 3  # begins with a question
    assert [text for _, text in opening[:5]] == ["第 27 个问题", "第 27 个回答", "第 28 个问题", "第 28 个回答",
                                                "第 29 个问题"]
    assert long_answer.startswith(opening[5][1]) and sum(len(t.encode()) for _, t in opening) <= 4000

    # Its next request, with the whole history still, continues that conversation.
    llm_settings.reply_text("不客气。")
    again, _ = _ask(client, [*history, {"role": "user", "content": "总结一下"}, {"role": "assistant", "content": "好的。"},
                             {"role": "user", "content": "谢谢"}])
    assert again == conversation_id and Conversation.objects.count() == 1


def test_a_question_too_long_for_the_caps_is_left_out_whole(client, llm_settings, agent, settings):
    settings.OPENAI_API_OPENING_BYTES_MAX = 100
    llm_settings.reply_text("嗯。")
    conversation_id, _ = _ask(client, [{"role": "user", "content": "问" * 200}, {"role": "assistant", "content": "答"},
                                       {"role": "user", "content": "还有呢"}])
    assert _rows(conversation_id) == [("user", "还有呢", False), ("assistant", "嗯。", False)]
