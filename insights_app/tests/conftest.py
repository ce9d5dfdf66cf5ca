"""Fixtures of the routing and usage tests: a two-sub-agent catalog and a model that routes by
reading the tool descriptions it is offered (as a real model does)."""
import pytest

from insights_app.models import RoutingArgExpectation, RoutingCase
from insights_app.tests.helpers import CANTEEN_DESCRIPTION, COURSE_DESCRIPTION
from subagents_app.models import SubAgent


@pytest.fixture
def subagents_unserved(db) -> tuple[SubAgent, SubAgent]:
    """`canteen` and `course` at addresses nothing serves: a routing check never calls them."""
    canteen = SubAgent.objects.create(name="canteen", description=CANTEEN_DESCRIPTION,
                                      base_url="http://canteen-agent:8000", domain="canteen")
    course = SubAgent.objects.create(name="course", description=COURSE_DESCRIPTION,
                                     base_url="http://course-agent:8000", domain="course")
    return canteen, course


@pytest.fixture
def routing_agent(agent_factory, subagents_unserved):
    """The default agent `xiaozhi`, offered call_canteen and call_course."""
    return agent_factory(sub_agents=list(subagents_unserved))


@pytest.fixture
def case_factory(routing_agent):
    def make(question: str, *, must_call=(), must_not_call=(), contains=(), agent=None, **fields) -> RoutingCase:
        case = RoutingCase.objects.create(agent=agent or routing_agent, question=question, must_call=list(must_call),
                                          must_not_call=list(must_not_call), **fields)
        for tool, argument, text in contains:
            RoutingArgExpectation.objects.create(case=case, tool=tool, argument=argument, contains=text)
        return case

    return make


@pytest.fixture
def canteen_case(case_factory) -> RoutingCase:
    return case_factory("二食堂晚饭吃什么", must_call=["call_canteen"], must_not_call=["call_course"],
                        contains=[("call_canteen", "message", "二食堂")])


@pytest.fixture
def headers_for(db):
    """`headers_for(user)` → the Authorization header of a fresh API login of `user`."""
    from chat_app.accounts.sessions import auth_session_create

    def make(user) -> dict:
        token = auth_session_create(user=user, via="password", roles=["student"], campus_token="").access_token
        return {"Authorization": f"Bearer {token}"}

    return make
