"""Answer feedback in admin (issue 13): listed, filtered by rating / comment / agent, read-only."""
import pytest
from django.urls import reverse

from chat_app.models import Conversation, Feedback, Message

pytestmark = pytest.mark.django_db


@pytest.fixture
def ratings(user, other_user):
    def answer(owner, text, agent_name):
        conversation = Conversation.objects.create(user=owner, title=f"关于{text}")
        return Message.objects.create(conversation=conversation, role="assistant", content=text, agent_name=agent_name)

    return [
        Feedback.objects.create(message=answer(user, "红烧肉 12 元", "校园小智"), user=user, rating="up"),
        Feedback.objects.create(
            message=answer(other_user, "高数还有 3 个名额", "选课助手"), user=other_user, rating="down", comment="名额已满"
        ),
    ]


def _listing(client, **params) -> str:
    response = client.get(reverse("admin:chat_app_feedback_changelist"), params)
    assert response.status_code == 200
    return response.content.decode()


def test_staff_list_and_filter_feedback(staff_client, ratings):
    page = _listing(staff_client)
    assert "红烧肉 12 元" in page and "名额已满" in page and "没帮助" in page
    down = _listing(staff_client, rating="down")
    assert "名额已满" in down and "红烧肉 12 元" not in down
    commented = _listing(staff_client, has_comment="yes")
    assert "名额已满" in commented and "红烧肉 12 元" not in commented
    by_agent = _listing(staff_client, message__agent_name="校园小智")
    assert "红烧肉 12 元" in by_agent and "名额已满" not in by_agent
    assert "名额已满" in _listing(staff_client, q="名额")


def test_feedback_is_read_only_in_admin(staff_client, ratings):
    change = reverse("admin:chat_app_feedback_change", args=[ratings[1].pk])
    page = staff_client.get(change).content.decode()
    assert "名额已满" in page and reverse("admin:chat_app_conversation_change", args=[ratings[1].message.conversation_id]) in page
    staff_client.post(change, {"rating": "up", "comment": "改掉"})
    assert Feedback.objects.get(pk=ratings[1].pk).comment == "名额已满"
    assert staff_client.get(reverse("admin:chat_app_feedback_add")).status_code == 403
