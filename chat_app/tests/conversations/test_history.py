"""History the model sees (docs/design.md#the-tool-loop) and conversation titles."""
import pytest

from chat_app.conversations.history import history_build
from chat_app.models import Conversation, Message
from chat_app.runs.admission import conversation_title


@pytest.mark.parametrize(
    ("question", "title"),
    [
        ("  今天\n中午   吃啥 ", "今天 中午 吃啥"),
        (" \n\t ", "新对话"),
        ("一二三四五六七八九十一二三四五六七八九十一二三四", "一二三四五六七八九十一二三四五六七八九十一二三四"),
        ("一二三四五六七八九十一二三四五六七八九十一二三四五", "一二三四五六七八九十一二三四五六七八九十一二三四..."),
    ],
)
def test_conversation_title(question, title):
    assert conversation_title(first_message=question) == title


@pytest.fixture
def tool_conversation(user):
    conversation = Conversation.objects.create(user=user)
    rows = [
        ("user", "食堂菜单", {}),
        ("assistant", "", {"tool_calls": [{"id": "c1", "type": "function", "function": {"name": "call_canteen", "arguments": "{}"}},
                                           {"id": "c2", "type": "function", "function": {"name": "tools__add", "arguments": "{}"}}]}),
        ("tool", "红烧肉", {"tool_call_id": "c1", "tool": "call_canteen", "ok": True}),
        ("tool", "3", {"tool_call_id": "c2", "tool": "tools__add", "ok": True}),
        ("assistant", "今天有红烧肉。", {}),
        ("user", "还有呢", {}),
        ("assistant", "", {"interrupted": True}),
        ("user", "再说说", {}),
    ]
    # All in one batch on purpose: equal timestamps, so `seq` alone must keep the order.
    messages = Message.objects.bulk_create(
        [Message(conversation=conversation, role=r, content=c, meta=m, seq=i) for i, (r, c, m) in enumerate(rows)]
    )
    Message.objects.filter(id__in=[m.id for m in messages]).update(created_at=messages[0].created_at)
    return conversation


@pytest.mark.django_db
def test_history_in_openai_format(tool_conversation):
    history = history_build(conversation=tool_conversation, limit=20)
    assert history == [
        {"role": "user", "content": "食堂菜单"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "call_canteen", "arguments": "{}"}},
            {"id": "c2", "type": "function", "function": {"name": "tools__add", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "红烧肉"},
        {"role": "tool", "tool_call_id": "c2", "content": "3"},
        {"role": "assistant", "content": "今天有红烧肉。"},
        {"role": "user", "content": "还有呢"},
        # the interrupted empty reply carries nothing for the model
        {"role": "user", "content": "再说说"},
    ]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("limit", "first"),
    [
        (8, {"role": "user", "content": "食堂菜单"}),
        (7, "tool_calls"),  # starting at the group's assistant row is fine
        (6, {"role": "assistant", "content": "今天有红烧肉。"}),  # two tool rows dropped
        (5, {"role": "assistant", "content": "今天有红烧肉。"}),  # one tool row dropped
        (3, {"role": "user", "content": "还有呢"}),
    ],
)
def test_history_window_never_starts_inside_a_tool_group(tool_conversation, limit, first):
    history = history_build(conversation=tool_conversation, limit=limit)
    if first == "tool_calls":
        assert [c["id"] for c in history[0]["tool_calls"]] == ["c1", "c2"]
    else:
        assert history[0] == first
    assert history[-1] == {"role": "user", "content": "再说说"}
