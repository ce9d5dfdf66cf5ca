"""The course demo sub-agent: searches the bundled course catalogue and charts remaining seats."""
import re

from demo_app.subagents.answer import DemoAnswer, answer_from_lines, chart_bar, first_found
from demo_app.subagents.data import demo_data_load

CATEGORY_WORDS = ("通识", "专业", "体育", "必修", "选修")
SEATS_WORDS = ("余量", "名额", "剩余", "满了", "还能选", "空位", "剩多少", "抢")
_CN_NUMBERS = {"一": 1, "两": 2, "二": 2, "三": 3, "四": 4, "五": 5}
_CREDITS = re.compile(r"(\d+(?:\.\d+)?|[一两二三四五])\s*个?学分")
_WEEKDAY = re.compile(r"(?:周|星期|礼拜)([一二三四五六日天])")


def _normalise(text: str) -> str:
    # Students type "python课" or "Python 程序设计"; compare without case and spaces.
    return re.sub(r"\s+", "", text).lower()


def _remaining(course: dict) -> int:
    return max(course["capacity"] - course["enrolled"], 0)


def _filters(message: str, courses: list[dict]) -> list[tuple[str, object]]:
    """The conditions the question states, as (kind, value); kinds combine with AND."""
    text = _normalise(message)
    found: list[tuple[str, object]] = []
    teachers = sorted({c["teacher"] for c in courses if _normalise(c["teacher"]) in text})
    if teachers:
        found.append(("teacher", teachers))
    if match := _CREDITS.search(message):
        raw = match.group(1)
        found.append(("credits", float(_CN_NUMBERS.get(raw, raw))))
    if match := _WEEKDAY.search(message):
        found.append(("day", "周" + ("日" if match.group(1) == "天" else match.group(1))))
    categories = [word for word in CATEGORY_WORDS if word in message]
    if categories:
        found.append(("category", categories))
    topics = sorted(
        {word for c in courses for word in [c["name"], c["code"], *c["tags"]] if _normalise(word) in text}
    )
    # "数据结构" also contains the tag "数据": keep only the longest of overlapping topics.
    topics = [t for t in topics if not any(t != other and _normalise(t) in _normalise(other) for other in topics)]
    if topics:
        found.append(("topic", topics))
    return found


def _matches(course: dict, kind: str, value) -> bool:
    if kind == "teacher":
        return course["teacher"] in value
    if kind == "credits":
        return float(course["credits"]) == value
    if kind == "day":
        return value in course["time"]
    if kind == "category":
        return all(word in course["category"] for word in value)
    words = {_normalise(w) for w in [course["name"], course["code"], *course["tags"]]}
    return any(_normalise(topic) in words for topic in value)


def _describe(filters: list[tuple[str, object]]) -> str:
    labels = {"teacher": "教师", "credits": "学分", "day": "上课日", "category": "类别", "topic": "关键词"}
    parts = []
    for kind, value in filters:
        shown = "、".join(value) if isinstance(value, list) else f"{value:g}" if isinstance(value, float) else value
        parts.append(f"{labels[kind]}：{shown}")
    return "；".join(parts)


def course_answer(*, message: str) -> DemoAnswer:
    """Finds the courses a question asks about (teacher, credits, weekday, category, topic; all
    courses when it names none) and lists them with remaining seats, charted."""
    catalogue = demo_data_load(name="course")
    courses = catalogue["courses"]
    filters = _filters(message, courses)
    found = [c for c in courses if all(_matches(c, kind, value) for kind, value in filters)]
    lookup_args = {"filters": _describe(filters) or "全部课程"}
    if not found:
        lines = [
            f"在{catalogue['term']}的课程目录里没有找到符合条件（{_describe(filters)}）的课程。",
            "",
            "可以换个说法试试，比如：“李明老师的课”“2 学分的通识课”“周三有什么课”“羽毛球还有名额吗”。",
        ]
        return answer_from_lines(lines, lookup="course_search", lookup_args=lookup_args)

    if first_found(message, SEATS_WORDS):
        found = sorted(found, key=_remaining, reverse=True)
    if filters:
        heading = f"在{catalogue['term']}的课程目录中找到 {len(found)} 门课程（{_describe(filters)}）："
    else:
        heading = f"没有认出具体的课程名、老师或学分，先列出{catalogue['term']}的全部 {len(found)} 门课程："
    lines = [
        heading,
        "",
        "| 课程 | 教师 | 学分 | 类别 | 上课时间 | 地点 | 剩余名额 |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in found:
        seats = f"{_remaining(c)}/{c['capacity']}" if _remaining(c) else f"0/{c['capacity']}（已满）"
        lines.append(
            f"| {c['code']} {c['name']} | {c['teacher']} | {c['credits']:g} | {c['category']} "
            f"| {c['time']} | {c['place']} | {seats} |"
        )
    open_count = sum(1 for c in found if _remaining(c))
    seats_note = f"其中 {open_count} 门还有名额。" if open_count else "这些课程都已选满，可以关注退课补选。"
    lines += ["", seats_note + "选课请在教务系统完成，名额以教务系统实时数据为准（这里是演示数据）。"]
    chart = chart_bar(
        title="课程剩余名额", labels=[c["name"] for c in found], label="剩余名额", data=[_remaining(c) for c in found]
    )
    return answer_from_lines(lines, chart=chart, lookup="course_search", lookup_args=lookup_args)
