"""Every tool is known through the one interface (runtime/tool.py): the loop and keyword routing
work with a tool of any kind, never asking whether it is an MCP tool or a sub-agent."""
import pytest

from agents_app.mcp.tools import McpToolInfo
from agents_app.models import McpService
from agents_app.runtime.context import RunContext
from agents_app.runtime.events import ToolResult
from agents_app.runtime.fallback import capabilities_text, tool_fallback_args, tool_match
from agents_app.runtime.mcp_tool import McpTool
from agents_app.runtime.subagent_tool import SubAgentTool
from agents_app.runtime.tool import Tool, ToolOutcome, tool_spec
from agents_app.runtime.tool_names import mcp_tool_name, subagent_tool_name
from agents_app.runtime.tool_runs import ToolRequest, tool_calls_run
from subagents_app.models import SubAgent

CTX = RunContext(request_id="0123456789abcdef", conversation_id="conv-1")


class LibraryTool:
    """A third kind of tool: it needs a `query`, which it phrases from the question itself,
    and answers in sentences."""

    name = "library_search"
    description = "图书馆藏书查询：借书、馆藏"
    parameters = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
    keyword_text = "library"
    answers_in_prose = True
    approval = "auto"

    def fallback_args(self, question: str) -> dict | None:
        return {"query": question.removesuffix("？")}

    async def run(self, args, ctx, emit):
        await emit("正在查询馆藏…")
        return ToolOutcome(text=f"《{args['query']}》在三楼。")


def _mcp(description: str, schema: dict | None = None) -> McpTool:
    info = McpToolInfo(name="books", description=description, input_schema=schema)
    return McpTool(service=McpService(name="catalog"), info=info)


def test_keyword_routing_asks_the_tool_how_to_call_it():
    library = LibraryTool()
    assert tool_fallback_args(tool=library, question="三体在哪？") == {"query": "三体在哪"}
    # a required argument an MCP tool cannot get from the question still rules it out
    assert tool_fallback_args(tool=_mcp("馆藏", {"type": "object", "required": ["isbn"]}), question="馆藏") is None


def test_a_tool_answering_in_prose_wins_a_tie_and_is_listed_first_whatever_its_kind():
    library, data = LibraryTool(), _mcp("馆藏")
    for tools in ([data, library], [library, data]):
        assert tool_match(question="馆藏", tools=tools).tool is library
    lines = capabilities_text(tools=[data, library]).splitlines()
    assert lines[1] == "- 图书馆藏书查询：借书、馆藏"


def test_the_words_of_a_tool_come_from_its_keyword_text():
    assert tool_match(question="library hours", tools=[LibraryTool()]).keywords == ("library",)
    row = SubAgent(name="course-select", description="选课")
    assert tool_match(question="course select", tools=[SubAgentTool(sub_agent=row)]).keywords == ("course", "select")


async def test_the_loop_runs_a_tool_of_any_kind_through_the_interface():
    library: Tool = LibraryTool()
    request = ToolRequest(call_id="call_1", tool=library.name, args={"query": "三体"})
    events = [e async for e in tool_calls_run(calls=[request], tools_by_name={library.name: library}, ctx=CTX,
                                              deadline=float("inf"))]
    assert [type(e).__name__ for e in events] == ["ToolChunk", "ToolResult"]
    assert events[-1] == ToolResult(call_id="call_1", tool="library_search", ok=True, content="《三体》在三楼。")
    assert tool_spec(library)["function"]["parameters"]["required"] == ["query"]


@pytest.mark.parametrize(
    ("service", "tool", "expected"),
    [
        ("Campus Data.API", "Get-Score", "campus_data_api__get-score"),
        ("campus-calendar", "current_time", "campus-calendar__current_time"),
    ],
)
def test_mcp_tools_are_named_service_dunder_tool(service, tool, expected):
    assert mcp_tool_name(service=service, tool=tool) == expected
    assert _mcp("d").name == "catalog__books"


def test_sub_agents_are_named_call_and_underscores_within_64_characters():
    assert subagent_tool_name(sub_agent="course-select") == "call_course_select"
    long_name = subagent_tool_name(sub_agent="campus-" + "x" * 49 + "-notice")
    assert len(long_name) == 64 and long_name.startswith("call_campus_")
    assert SubAgentTool(sub_agent=SubAgent(name="course-select", description="d")).name == "call_course_select"
