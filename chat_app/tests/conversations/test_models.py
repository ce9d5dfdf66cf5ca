import uuid

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from agents_app.models import Agent
from chat_app.models import DEFAULT_TITLE, Conversation, Message

pytestmark = pytest.mark.embedded


@pytest.fixture
def plain_agent(db) -> Agent:
    return Agent.objects.create(slug="xiaozhi", name="校园小智", is_default=True)


@pytest.fixture
def conversation(user, plain_agent) -> Conversation:
    return Conversation.objects.create(user=user, agent=plain_agent)


@pytest.mark.django_db
def test_conversation_defaults(conversation):
    assert isinstance(conversation.id, uuid.UUID)
    assert conversation.title == DEFAULT_TITLE == "新对话"
    assert conversation.hint_domain == ""


@pytest.mark.django_db
@pytest.mark.parametrize("role", ["user", "assistant", "tool"])
def test_message_roles_accepted(conversation, role):
    Message(conversation=conversation, role=role, content="你好").full_clean()
    Message.objects.create(conversation=conversation, role=role, content="你好")


@pytest.mark.django_db
@pytest.mark.parametrize("role", ["system", "", "USER"])
def test_message_role_is_checked_by_clean_and_by_the_database(conversation, role):
    with pytest.raises(ValidationError) as info:
        Message(conversation=conversation, role=role).full_clean()
    assert "role" in info.value.message_dict
    with pytest.raises(IntegrityError), transaction.atomic():
        Message.objects.create(conversation=conversation, role=role, content="x")
    ok = Message.objects.create(conversation=conversation, role="user", content="x")
    with pytest.raises(IntegrityError), transaction.atomic():
        Message.objects.filter(pk=ok.pk).update(role=role)


@pytest.mark.django_db
def test_messages_of_one_batch_keep_their_seq_order(conversation):
    # bulk_create gives every row the same instant when the clock does not move between them;
    # force it, so only seq can order them.
    rows = [
        Message(conversation=conversation, role=role, content=str(i), seq=i)
        for i, role in enumerate(["assistant", "tool", "tool", "assistant"])
    ]
    Message.objects.bulk_create(rows)
    Message.objects.filter(conversation=conversation).update(created_at=rows[0].created_at)
    assert [m.content for m in conversation.messages.all()] == ["0", "1", "2", "3"]


@pytest.mark.django_db
def test_meta_and_chart_round_trip_json(conversation):
    meta = {"tool_calls": [{"id": "c1", "type": "function", "function": {"name": "call_canteen", "arguments": "{}"}}]}
    chart = {"type": "bar", "labels": ["一食堂"], "series": [{"name": "价格", "data": [12]}]}
    saved = Message.objects.create(conversation=conversation, role="assistant", meta=meta, chart=chart)
    loaded = Message.objects.get(pk=saved.pk)
    assert (loaded.meta, loaded.chart) == (meta, chart)
    assert Message.objects.create(conversation=conversation, role="user").chart is None


@pytest.mark.django_db
def test_deleting_a_conversation_deletes_its_messages(conversation):
    Message.objects.create(conversation=conversation, role="user", content="你好")
    conversation.delete()
    assert Message.objects.count() == 0


@pytest.mark.django_db
def test_deleting_an_agent_keeps_its_conversations(conversation, plain_agent):
    plain_agent.delete()
    conversation.refresh_from_db()
    assert conversation.agent is None


@pytest.mark.django_db
def test_deleting_a_user_deletes_their_conversations(conversation, user):
    user.delete()
    assert not Conversation.objects.filter(pk=conversation.pk).exists()


@pytest.mark.django_db
def test_conversations_list_most_recent_first(user, plain_agent):
    older = Conversation.objects.create(user=user, agent=plain_agent, title="旧")
    newer = Conversation.objects.create(user=user, agent=plain_agent, title="新")
    assert list(Conversation.objects.filter(user=user)) == [newer, older]
    older.save()  # touched: updated_at moves
    assert list(Conversation.objects.filter(user=user)) == [older, newer]
