import pytest
from django.urls import reverse

from agents_app.models import Agent
from chat_app.models import Conversation, Message
from testkit.web.admin_forms import admin_login_required_check


@pytest.fixture
def conversation(user) -> Conversation:
    agent = Agent.objects.create(slug="xiaozhi", name="校园小智", is_default=True)
    conversation = Conversation.objects.create(user=user, agent=agent, title="今天中午吃啥")
    Message.objects.create(conversation=conversation, role="user", content="今天中午吃啥", seq=0)
    Message.objects.create(
        conversation=conversation,
        role="assistant",
        content="一食堂今天有红烧肉套餐。",
        meta={"usage": {"total_tokens": 42}},
        agent_name="校园小智",
        request_id="0123456789abcdef",
        seq=1,
    )
    return conversation


def pages(conversation: Conversation) -> list[str]:
    return [
        reverse("admin:chat_app_conversation_changelist"),
        reverse("admin:chat_app_conversation_change", args=[conversation.pk]),
    ]


@pytest.mark.django_db
def test_staff_sees_conversations_and_their_messages(staff_client, conversation):
    listing = staff_client.get(pages(conversation)[0])
    assert listing.status_code == 200
    assert "今天中午吃啥" in listing.content.decode()

    page = staff_client.get(pages(conversation)[1])

    assert page.status_code == 200
    html = page.content.decode()
    assert "一食堂今天有红烧肉套餐。" in html
    assert "0123456789abcdef" in html


@pytest.mark.django_db
def test_message_inline_is_read_only(staff_client, conversation):
    page = staff_client.get(pages(conversation)[1])
    (inline,) = [i for i in page.context["inline_admin_formsets"] if i.formset.model is Message]

    assert not inline.has_add_permission and not inline.has_change_permission and not inline.has_delete_permission
    html = page.content.decode()
    assert 'name="messages-0-content"' not in html  # shown as text, never as an input
    assert "messages-0-DELETE" not in html
    # Rows in the order they were stored.
    assert html.index("今天中午吃啥</") < html.index("一食堂今天有红烧肉套餐。")


@pytest.mark.django_db
def test_a_post_to_the_change_page_does_not_alter_messages(staff_client, conversation):
    before = list(conversation.messages.values())
    staff_client.post(
        pages(conversation)[1],
        {
            "messages-TOTAL_FORMS": "1",
            "messages-INITIAL_FORMS": "0",
            "messages-0-role": "assistant",
            "messages-0-content": "伪造的回答",
        },
    )
    assert list(conversation.messages.values()) == before


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["student", "anonymous"])
def test_non_staff_are_sent_to_the_admin_login(client, user, conversation, who):
    if who == "student":
        client.force_login(user)  # even the conversation's own student
    admin_login_required_check(client, pages(conversation))
