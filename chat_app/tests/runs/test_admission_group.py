"""Issue 46 step 3: the admissions that come together are written together (group commit,
campus_agent.base.group_commit), each turn with its own outcome: one refused (a conversation
that is not the caller's: 404; one whose run has not ended: 409) is refused alone and the others
are admitted; a group whose transaction fails (the database itself refuses one question's row:
a trigger) is admitted turn by turn, the refused one's error its own.

Real database threads; the groups are watched by wrapping ADMISSIONS' own functions."""
import uuid

import pytest

from campus_agent.base import errors
from campus_agent.base.group_commit import GroupCommit
from chat_app.accounts.authentication import Caller
from chat_app.models import Conversation, Message, Run
from chat_app.runs.admission import ADMISSIONS, CONVERSATION_BUSY, Admission, TurnStart
from chat_app.runs.chat_input import ChatInput
from chat_app.runs.lease import RunLease
from chat_app.runs.state import run_create
from testkit.group_commit import all_at_once, group_commit_watched
from testkit.refused_rows import rows_refused

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.embedded]

REFUSED = "不能存的问题"


def _admission(user, message: str, *, conversation_id=None, slot: int = 0) -> Admission:
    chat = ChatInput(message=message, conversation_id=conversation_id, agent=None, hint_domain=None)
    return Admission(caller=Caller(user=user, auth_session=None), chat=chat, request_id=uuid.uuid4().hex[:16],
                     lease=RunLease.adopted(key=f"chat:streams:{user.pk}:{slot}"))


def _watched(groups: list[int]) -> GroupCommit:
    return group_commit_watched(ADMISSIONS, groups)


def _questions() -> list[str]:
    return sorted(Message.objects.filter(role=Message.Role.USER).values_list("content", flat=True))


def test_admissions_that_come_together_are_one_group_and_a_refused_one_is_refused_alone(user, other_user, agent):
    theirs = Conversation.objects.create(user=other_user, agent=agent, title="别人的")
    busy = Conversation.objects.create(user=user, agent=agent, title="还在回答")
    run_create(conversation=busy, user=user, request_id="0" * 16, agent_name="小智", slot_key="")
    groups: list[int] = []
    outcomes = all_at_once(_watched(groups), [
        _admission(user, "第一问", slot=0),
        _admission(user, "不是我的对话", conversation_id=theirs.id, slot=1),
        _admission(user, "上一轮没完", conversation_id=busy.id, slot=2),
        _admission(other_user, "第二问", slot=0),
    ])
    assert groups == [4]  # one crossing, one transaction
    assert isinstance(outcomes[0], TurnStart) and isinstance(outcomes[3], TurnStart)
    assert isinstance(outcomes[1], errors.ApiError) and outcomes[1].status == 404
    assert isinstance(outcomes[2], errors.ApiError) and outcomes[2].code == CONVERSATION_BUSY
    assert _questions() == ["第一问", "第二问"]  # the refused ones stored nothing
    assert Run.objects.get(id=outcomes[0].run.id).status == Run.Status.RUNNING


def test_a_group_whose_transaction_fails_is_admitted_turn_by_turn(user, other_user, agent):
    groups: list[int] = []
    with rows_refused(f"NEW.content = '{REFUSED}'"):
        outcomes = all_at_once(_watched(groups), [
            _admission(user, "第一问"), _admission(other_user, REFUSED), _admission(user, "第三问", slot=1),
        ])
    assert groups == [3, 1, 1, 1]  # the group failed as a whole, then each alone
    assert isinstance(outcomes[0], TurnStart) and isinstance(outcomes[2], TurnStart)
    assert "refused by the test" in str(outcomes[1])  # its own error, to its own caller
    assert _questions() == ["第一问", "第三问"]
    assert not Conversation.objects.filter(user=other_user).exists()  # nothing of the refused turn


def test_a_lone_admission_is_written_as_without_a_group(user, agent):
    groups: list[int] = []
    (outcome,) = all_at_once(_watched(groups), [_admission(user, "一个人")])
    assert groups == [1] and isinstance(outcome, TurnStart)
