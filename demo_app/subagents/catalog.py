"""The demo sub-agents: what `load_demo` registers and what the demo views serve.

The descriptions are what the model (and the keyword fallback) reads to pick a sub-agent, so
they list the trigger words students actually type, in Chinese and in English.
"""
from collections.abc import Callable
from dataclasses import dataclass

from demo_app.subagents.answer import DemoAnswer
from demo_app.subagents.canteen import canteen_answer
from demo_app.subagents.course import course_answer


@dataclass(frozen=True, slots=True)
class DemoSubAgent:
    name: str
    domain: str
    description: str
    answer: Callable[..., DemoAnswer]


DEMO_SUBAGENTS: dict[str, DemoSubAgent] = {
    agent.name: agent
    for agent in (
        DemoSubAgent(
            name="canteen",
            domain="canteen",
            description=(
                "食堂助手（演示）：查询各食堂的菜单、菜价、热量和营业时间，并按价格或热量画柱状图。"
                "关键词：食堂、餐厅、吃什么、吃啥、菜单、早餐、午餐、晚餐、早饭、午饭、晚饭、菜价、"
                "便宜、热量、营业时间、一食堂、二食堂、清真食堂。"
                "Keywords: canteen, cafeteria, dining, menu, food, eat, breakfast, lunch, dinner, meal, "
                "price, cheap, calorie, halal, hour."
            ),
            answer=canteen_answer,
        ),
        DemoSubAgent(
            name="course",
            domain="course",
            description=(
                "选课助手（演示）：按课程名、教师、学分、上课日或类别搜索本学期课程目录，"
                "给出上课时间、地点和剩余名额，并画出剩余名额图。"
                "关键词：选课、课程、什么课、哪些课、课表、学分、老师、教师、名额、余量、"
                "通识课、体育课、必修课、选修课。"
                "Keywords: course, class, selection, timetable, credit, teacher, professor, lecturer, "
                "seat, elective, compulsory."
            ),
            answer=course_answer,
        ),
    )
}
