"""Routing cases for the demo catalog (`manage.py load_demo_cases`, run by scripts/run.sh after
load_demo). They pass with keyword routing out of the box, and state what a model must do too."""
from dataclasses import dataclass, field

from django.db import transaction

from agents_app.models import Agent
from insights_app.models import ANY_TOOL, RoutingArgExpectation, RoutingCase

DEMO_AGENT_SLUG = "xiaozhi"  # load_demo's agent
DEMO_NOTE = "演示用例（load_demo_cases）：演示目录在关键词路由下应当全部通过。"


@dataclass(frozen=True)
class DemoCase:
    question: str
    must_call: tuple[str, ...] = ()
    must_not_call: tuple[str, ...] = ()
    contains: tuple[tuple[str, str, str], ...] = field(default=())  # (tool, argument, text)


DEMO_CASES = (
    DemoCase("二食堂晚饭有什么便宜的", must_call=("call_canteen",), must_not_call=("call_course",),
             contains=(("call_canteen", "message", "二食堂"),)),
    DemoCase("李明老师的课还有名额吗", must_call=("call_course",), must_not_call=("call_canteen",),
             contains=(("call_course", "message", "李明"),)),
    DemoCase("周末图书馆几点关门", must_call=("call_library",), must_not_call=("call_canteen", "call_course"),
             contains=(("call_library", "message", "图书馆"),)),  # the demo A2A agent
    DemoCase("期末考试是什么时候", must_call=("campus-calendar__academic_calendar",),
             must_not_call=("call_canteen", "call_course", "call_library")),
    DemoCase("你好", must_not_call=(ANY_TOOL,)),
)


@transaction.atomic
def demo_cases_load() -> tuple[int, int]:
    """Creates the demo cases the demo agent does not have yet (by question); returns
    (created, kept). Nothing when there is no demo agent (run load_demo first)."""
    agent = Agent.objects.filter(slug=DEMO_AGENT_SLUG).first()
    if agent is None:
        return 0, 0
    created = kept = 0
    for demo in DEMO_CASES:
        case, made = RoutingCase.objects.get_or_create(
            agent=agent, question=demo.question,
            defaults={"must_call": list(demo.must_call), "must_not_call": list(demo.must_not_call), "notes": DEMO_NOTE},
        )
        if made:
            RoutingArgExpectation.objects.bulk_create(
                RoutingArgExpectation(case=case, tool=tool, argument=argument, contains=text)
                for tool, argument, text in demo.contains
            )
        created, kept = created + made, kept + (not made)
    return created, kept
