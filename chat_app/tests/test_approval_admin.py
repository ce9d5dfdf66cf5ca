"""Tool approvals in admin: staff see every call that asked a student first and its outcome,
filter by outcome and tool, and cannot change the record."""
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from chat_app.models import Conversation, Run, Wait

pytestmark = pytest.mark.django_db


@pytest.fixture
def approvals(user, other_user):
    def approval(owner, tool, args, status):
        conversation = Conversation.objects.create(user=owner, title="选课")
        run = Run.objects.create(conversation=conversation, user=owner, heartbeat_at=timezone.now(),
                                 status=Run.Status.FINISHED)
        return Wait.objects.create(run=run, call_id=f"call_{tool}", tool=tool, args=args, status=status,
                                           expires_at=timezone.now() + timedelta(minutes=10))

    return [
        approval(user, "call_course_select", '{"message": "选 CS101"}', Wait.Status.APPROVED),
        approval(other_user, "campus__book_room", '{"room": "<b>A101</b>"}', Wait.Status.REJECTED),
    ]


def test_staff_list_and_filter_approvals(staff_client, approvals):
    url = reverse("admin:chat_app_wait_changelist")
    listing = staff_client.get(url).content.decode()
    assert "call_course_select" in listing and "campus__book_room" in listing and "已批准" in listing
    assert "<b>A101</b>" not in listing  # arguments are shown as text
    rejected = staff_client.get(url, {"status__exact": "rejected"}).context["cl"].result_list
    assert [a.tool for a in rejected] == ["campus__book_room"]


def test_approvals_are_read_only_in_admin(staff_client, approvals):
    change = reverse("admin:chat_app_wait_change", args=[approvals[0].pk])
    page = staff_client.get(change)
    assert page.status_code == 200 and "选 CS101" in page.content.decode()
    staff_client.post(change, {"status": "rejected"})
    approvals[0].refresh_from_db()
    assert approvals[0].status == Wait.Status.APPROVED
    assert staff_client.get(reverse("admin:chat_app_wait_add")).status_code == 403
    delete = reverse("admin:chat_app_wait_delete", args=[approvals[0].pk])
    assert staff_client.post(delete, {"post": "yes"}).status_code == 403


def test_staff_see_a_servers_question_and_how_it_was_answered_not_what_was_typed(staff_client, user):
    conversation = Conversation.objects.create(user=user, title="选课")
    run = Run.objects.create(conversation=conversation, user=user, heartbeat_at=timezone.now(),
                             status=Run.Status.FINISHED)
    asked = Wait.objects.create(
        run=run, call_id="call_enrol", tool="courses__enrol", kind=Wait.Kind.ELICITATION,
        ask={"service": "选课", "message": "请填写选课信息", "mode": "form", "schema": {}, "defaults": {}},
        answer={"action": "accept", "content": {"phone": "13800138000"}}, status=Wait.Status.APPROVED,
        expires_at=timezone.now() + timedelta(minutes=10))
    page = staff_client.get(reverse("admin:chat_app_wait_change", args=[asked.pk])).content.decode()
    assert "请填写选课信息" in page and "已提交" in page and "回答服务的问题" in page and "已回答" in page
    assert "13800138000" not in page
