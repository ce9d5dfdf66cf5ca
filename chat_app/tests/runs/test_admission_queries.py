"""Issue 24: what a turn's admission costs the database, counted (a burst makes 1,000 of them at
once). The catalog is this worker's (agents_app.catalog_cache): one query for its stamp."""
import pytest
from asgiref.sync import async_to_sync

from agents_app.runtime.screening import turn_screens
from chat_app.accounts.authentication import Caller
from chat_app.models import Message
from chat_app.runs.admission import turn_admit
from chat_app.runs.chat_input import ChatInput
from chat_app.runs.engine import _turn_plan
from chat_app.runs.lease import RunLease
from chat_app.runs.recording import RowSpec
from chat_app.runs.state import run_finish
from safety_app.lists_cache import matchers_current
from safety_app.models import WordList

pytestmark = pytest.mark.embedded

CATALOG_TABLES = ("agents_app_agent", "agents_app_mcpservice", "subagents_app_subagent", "agents_app_agentfallback")


def _admit(user, *, conversation_id=None, message="你好"):
    """A turn's admission once its lease holds a slot (taken in the event loop, with no query)."""
    chat = ChatInput(message=message, conversation_id=conversation_id, agent=None, hint_domain=None)
    lease = RunLease.adopted(key=f"chat:streams:{user.pk}:0")  # held, counting no message
    return turn_admit(caller=Caller(user=user, auth_session=None), chat=chat, request_id="0123456789abcdef",
                      lease=lease)


@pytest.fixture
def warm(agent, user):
    """A first turn: the worker has read the catalog."""
    return _admit(user, message="第一问")


def _statements(captured) -> list[str]:
    return [query["sql"].split(" (")[0].split(" WHERE")[0][:80] for query in captured]


def test_a_new_conversation_costs_the_stamp_and_its_three_rows(warm, user, django_assert_num_queries):
    # The stamp, the user's groups with their limits (chat_app.runs.group_limits), the word lists'
    # stamp (safety_app.lists_cache); then, in one transaction (a savepoint inside the test's):
    # conversation, message, run.
    with django_assert_num_queries(8) as captured:
        start = _admit(user)
    assert not any(table in query["sql"] for query in captured for table in CATALOG_TABLES), _statements(captured)
    assert start.agent.slug == "xiaozhi" and [s.name for s in start.agent.enabled_sub_agents] == ["canteen"]
    assert start.history == [{"role": "user", "content": "你好"}]


def test_a_next_question_adds_the_conversation_and_its_history(warm, user, django_assert_num_queries):
    # The conversation (with its run that has not ended, if any), the stamp and the user's groups
    # with their limits, the word lists' stamp; the transaction (conversation saved, message, run);
    # the history read back.
    run_finish(run=warm.run, rows=[RowSpec(role="assistant", content="答", meta={}, is_final=True)], interrupted=False)
    with django_assert_num_queries(10) as captured:
        start = _admit(user, conversation_id=warm.conversation_id, message="再问")
    assert not any(table in query["sql"] for query in captured for table in CATALOG_TABLES[1:]), _statements(captured)
    assert [m["content"] for m in start.history] == ["第一问", "答", "再问"]


def test_the_turn_screens_its_answer_with_the_lists_its_admission_read(warm, user):
    # Issue 46: the word lists' stamp is read once per turn, by the admission; the turn's way to
    # the model makes no crossing to the database for it. A list saved in between applies from
    # the next turn (as one saved while the turn streams).
    start = _admit(user)
    chat = ChatInput(message="你好", conversation_id=None, agent=None, hint_domain=None)
    plan = _turn_plan(start, caller=Caller(user=user, auth_session=None), chat=chat, request_id="0123456789abcdef")
    admitted = plan.ctx.matchers
    assert admitted is start.moderation.matchers and admitted.by_stage["answer"].size == 0

    WordList.objects.create(name="涉政", category="涉政", action="block").words.create(word="甲乙丙")
    assert matchers_current().by_stage["answer"].size == 1  # what a read now would give
    screens = async_to_sync(turn_screens)(plan.ctx)
    assert screens.matchers is admitted


def test_the_finish_is_one_transaction_of_four_statements(warm, user, django_assert_num_queries):
    # In one transaction (a savepoint inside the test's, none nested): the run moved, the
    # conversation read (deleted meanwhile: nothing stored), the rows (with their one instant),
    # the conversation touched.
    reply = RowSpec(role="assistant", content="答", meta={"usage": {"prompt_tokens": 3, "completion_tokens": 2}},
                    is_final=True)
    with django_assert_num_queries(6) as captured:
        assert run_finish(run=warm.run, rows=[reply], interrupted=False)
    assert sum("SAVEPOINT" in query["sql"] for query in captured) == 2, _statements(captured)
    stored = Message.objects.get(id=warm.run.message_id)
    assert (stored.content, stored.prompt_tokens, stored.completion_tokens) == ("答", 3, 2)
