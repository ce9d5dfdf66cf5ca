"""The academic calendar behind the demo MCP tools: pure functions of a date and the bundled data."""
import json
import os
import re
from datetime import date, datetime, timedelta, timezone
from functools import cache
from pathlib import Path

from demo_app.mcp import NOW_ENV

WEEKDAYS = ("星期一", "星期二", "星期三", "星期四", "星期五", "星期六", "星期日")
DATA_FILE = Path(__file__).resolve().parent / "calendar.json"


def _campus_tz():
    # The subprocess may run without tzdata; Beijing has had no DST since 1991, so +08:00 is exact.
    try:
        from zoneinfo import ZoneInfo

        return ZoneInfo("Asia/Shanghai")
    except Exception:
        return timezone(timedelta(hours=8), "CST")


@cache
def calendar_data() -> dict:
    raw = json.loads(DATA_FILE.read_text(encoding="utf-8"))
    for item in raw["terms"] + raw["events"]:
        item["start"], item["end"] = date.fromisoformat(item["start"]), date.fromisoformat(item["end"])
    return raw


def campus_now() -> datetime:
    """Now in campus time; `CAMPUS_DEMO_NOW` pins it."""
    pinned = os.environ.get(NOW_ENV, "").strip()
    if pinned:
        value = datetime.fromisoformat(pinned)
        return value.astimezone(_campus_tz()) if value.tzinfo else value.replace(tzinfo=_campus_tz())
    return datetime.now(_campus_tz())


def _day_text(day: date) -> str:
    return f"{day.year}年{day.month}月{day.day}日（{WEEKDAYS[day.weekday()]}）"


def teaching_week(*, day: date) -> tuple[str, int] | None:
    """(term name, week number starting at 1) when `day` falls in a term, else None."""
    for term in calendar_data()["terms"]:
        if term["start"] <= day <= term["end"]:
            return term["name"], (day - term["start"]).days // 7 + 1
    return None


def _events_on(day: date) -> list[dict]:
    return [e for e in calendar_data()["events"] if e["start"] <= day <= e["end"]]


def week_describe(*, day: date) -> str:
    """Which teaching week and weekday a date is, and what happens that day."""
    lines = [f"{_day_text(day)}"]
    week = teaching_week(day=day)
    lines.append(f"是{week[0]}第 {week[1]} 教学周。" if week else "不在本学年的教学周内。")
    events = _events_on(day)
    if events:
        lines.append("当天校历安排：" + "、".join(e["name"] for e in events) + "。")
    return "".join(lines)


def time_describe(*, now: datetime) -> str:
    """The current campus time, date, weekday and teaching week, in one short paragraph."""
    return f"现在是北京时间 {now:%H:%M}，{week_describe(day=now.date())}"


def _status(event: dict, today: date) -> str:
    if event["end"] < today:
        return "已结束"
    if event["start"] <= today:
        return "进行中"
    return f"还有 {(event['start'] - today).days} 天"


_TERMS = re.compile(r"[\s,，、;；。.!！?？:：“”\"'（）()]+")


def _common_run(a: str, b: str) -> int:
    """The length of the longest run of characters `a` and `b` share."""
    best = 0
    for i in range(len(a)):
        for j in range(i + best + 1, len(a) + 1):
            if a[i:j] in b:
                best = j - i
            else:
                break
    return best


# The English words keyword routing passes on ("exam final": the demo calendar's English keywords,
# demo_app/mcp/server.py) and what they are in the calendar's names.
ENGLISH_TERMS = {
    "exam": ("考试",),
    "final": ("期末",),
    "midterm": ("期中",),
    "holiday": ("放假",),
    "vacation": ("寒假", "暑假"),
    "semester": ("学期",),
    "term": ("学期",),
    "winter": ("寒假",),
    "summer": ("暑假",),
    "selection": ("选课",),
}


def _term(word: str) -> tuple[str, ...]:
    """The ways `word` is written in the calendar's names (an English word: its Chinese)."""
    english = word.lower()
    return ENGLISH_TERMS.get(english) or ENGLISH_TERMS.get(english.removesuffix("s")) or (word,)


def calendar_events_matching(*, keyword: str) -> list[dict]:
    """The events a keyword (or several, or a whole question) is about: those whose name holds
    every term ("exam final" → 期末考试 twice), else one of them ("期末考试 什么时候" → both
    期末考试); else those sharing the longest run of at least two characters with it
    ("期末考试是什么时候" → 期末考试 again, not 期中考试周). English words count as their Chinese."""
    events = calendar_data()["events"]
    words = [t for t in _TERMS.split(keyword) if t]
    terms = [_term(word) for word in words]
    chosen = [e for e in events if all(any(w in e["name"] for w in term) for term in terms)]
    chosen = chosen or [e for e in events if any(w in e["name"] for term in terms for w in term)]
    if chosen:
        return chosen
    runs = [(max((_common_run(word, e["name"]) for word in words), default=0), e) for e in events]
    best = max((run for run, _ in runs), default=0)
    return [e for run, e in runs if run == best] if best >= 2 else []


def calendar_describe(*, today: date, keyword: str = "") -> str:
    """The calendar events (those `keyword` is about, when given: `calendar_events_matching`),
    with how far each is."""
    events = calendar_data()["events"]
    keyword = keyword.strip()
    chosen = calendar_events_matching(keyword=keyword) if keyword else events
    if not chosen:
        names = "、".join(e["name"] for e in events)
        return f"校历里没有与“{keyword}”相关的安排。本学年的安排有：{names}。"
    lines = [f"2026–2027 学年校历（今天是{_day_text(today)}）："]
    for event in chosen:
        span = _day_text(event["start"])
        if event["end"] != event["start"]:
            span += f" 至 {_day_text(event['end'])}"
        lines.append(f"- {event['name']}：{span}，{_status(event, today)}")
    return "\n".join(lines)
