"""The demo MCP server: three calendar tools built with the mcp SDK's MCPServer (mcp 2.x)."""
from datetime import date as Date

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from demo_app.mcp import DEMO_MCP_NAME
from demo_app.mcp.calendar import calendar_describe, campus_now, time_describe, week_describe

DATE_INVALID = "日期格式应为 YYYY-MM-DD，如 2026-10-08。"

server = MCPServer(
    DEMO_MCP_NAME,
    instructions="校园时间与校历（演示数据）：当前时间和教学周、学年校历安排、某天是第几周。",
    version="1.0.0",
)


# Descriptions list the words students type: the model and the keyword fallback both read them.
@server.tool(
    description=(
        "当前时间：现在几点、今天几号、今天星期几、日期、这是第几周、第几教学周。无需参数。"
        "Keywords: time, date, today, weekday, week."
    ),
    structured_output=False,
)
def current_time() -> str:
    return time_describe(now=campus_now())


@server.tool(
    description=(
        "校历查询：开学、放假、寒假、暑假、国庆、元旦、节假日、考试周、期中考试、期末考试、选课时间、"
        "什么时候、哪天。参数 keyword 可选（如“考试”“放假”），留空列出全部安排及距今天数。"
        "Keywords: calendar, semester, term, exam, final, midterm, holiday, vacation."
    ),
    structured_output=False,
)
def academic_calendar(keyword: str = "") -> str:
    return calendar_describe(today=campus_now().date(), keyword=keyword)


@server.tool(
    description="查询某一天是第几教学周、星期几、当天有什么校历安排。参数 date 为 YYYY-MM-DD。",
    structured_output=False,
)
def week_of_date(date: str) -> str:
    try:
        day = Date.fromisoformat(date.strip())
    except ValueError:
        raise ToolError(DATE_INVALID) from None
    return week_describe(day=day)
