"""The demo MCP server, spawned over stdio exactly as load_demo registers it, driven by the mcp SDK."""
from contextlib import asynccontextmanager

from mcp import Client, StdioServerParameters

from demo_app.catalog import demo_mcp_config
from demo_app.mcp import NOW_ENV
from demo_app.mcp.calendar import calendar_events_matching
from demo_app.mcp.server import DATE_INVALID


@asynccontextmanager
async def demo_server(now: str):
    """The registered config (interpreter, `-m demo_app.mcp`, its env) with the clock pinned."""
    config = demo_mcp_config()
    params = StdioServerParameters(**(config | {"env": config.get("env", {}) | {NOW_ENV: now}}))
    async with Client(params, read_timeout_seconds=10) as client:
        yield client


def _text(result) -> str:
    return "\n".join(part.text for part in result.content if part.type == "text")


async def test_lists_tools_and_answers_time_and_calendar():
    async with demo_server("2026-11-30T12:05:00+08:00") as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert set(tools) == {"current_time", "academic_calendar", "week_of_date"}
        # keyword routing may call only tools without required arguments
        assert not tools["current_time"].input_schema.get("required")
        assert not tools["academic_calendar"].input_schema.get("required")
        assert tools["week_of_date"].input_schema["required"] == ["date"]

        now = await client.call_tool("current_time", {})
        assert not now.is_error
        # 2026-09-07 is the Monday of week 1; 84 days later is the Monday of week 13.
        assert _text(now) == "现在是北京时间 12:05，2026年11月30日（星期一）是2026–2027 学年秋季学期第 13 教学周。"

        exams = _text(await client.call_tool("academic_calendar", {"keyword": "考试"}))
        lines = exams.splitlines()[1:]
        assert [line.split("：")[0] for line in lines] == ["- 期中考试周", "- 秋季学期期末考试", "- 春季学期期末考试"]
        assert lines[0].endswith("已结束")
        assert lines[1].endswith("还有 42 天")  # 2027-01-11 is 42 days after 2026-11-30


async def test_converts_to_campus_time_and_reports_bad_dates_as_tool_errors():
    # 20:30 UTC is 04:30 the next day in Beijing.
    async with demo_server("2026-09-30T20:30:00+00:00") as client:
        now = _text(await client.call_tool("current_time", {}))
        assert now.startswith("现在是北京时间 04:30，2026年10月1日（星期四）")
        assert "第 4 教学周" in now and "国庆节放假" in now

        holiday = await client.call_tool("week_of_date", {"date": "2027-01-24"})
        assert _text(holiday) == "2027年1月24日（星期日）不在本学年的教学周内。当天校历安排：寒假。"

        bad = await client.call_tool("week_of_date", {"date": "下周三"})
        assert bad.is_error
        assert DATE_INVALID in _text(bad)

        missing = _text(await client.call_tool("academic_calendar", {"keyword": "运动会"}))
        assert missing.startswith("校历里没有与“运动会”相关的安排。")


async def test_a_pinned_time_without_offset_is_campus_time():
    async with demo_server("2026-11-30T12:05:00") as client:
        assert _text(await client.call_tool("current_time", {})).startswith("现在是北京时间 12:05，2026年11月30日")


def test_the_calendar_reads_the_english_keywords_keyword_routing_passes_on():
    """Issue 42: "When are the final exams?" reaches academic_calendar with `keyword` "exam final"."""
    names = [event["name"] for event in calendar_events_matching(keyword="exam final")]
    assert names == ["秋季学期期末考试", "春季学期期末考试"]
    assert [event["name"] for event in calendar_events_matching(keyword="vacation")] == ["寒假", "暑假"]
    assert [event["name"] for event in calendar_events_matching(keyword="期末考试 什么时候")] == names
