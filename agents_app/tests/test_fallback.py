"""Keyword routing when the model is down: the matcher, and whole turns through turn_stream
against real sub-agents (the demo ones served by the project, the contract one) and MCP servers."""
import json
import socket
from contextlib import aclosing

import pytest
from asgiref.sync import sync_to_async
from django.utils import translation
from loguru import logger

from agents_app.mcp.tools import McpToolInfo
from agents_app.models import McpService
from agents_app.runtime.context import RunContext
from agents_app.runtime.events import Chunk, Done, Error, ToolCall, ToolChunk, ToolResult
from agents_app.runtime.fallback import (
    ATTACHMENTS_UNREAD_NOTE,
    CAPABILITIES_FOOTER,
    CAPABILITIES_HEADER,
    FOLLOW_UP_NOTE,
    NO_MATCH_NOTICE,
    UNCONFIGURED_CAPABILITIES_FOOTER,
    UNCONFIGURED_NO_MATCH_NOTICE,
    UNCONFIGURED_NOTICE,
    capabilities_text,
    keyword_candidates,
    tool_fallback_args,
    tool_match,
)
from agents_app.runtime.loop import TURN_TIMEOUT_TEXT
from agents_app.runtime.mcp_tool import McpTool
from agents_app.runtime.subagent_tool import SubAgentTool
from agents_app.runtime.turn import MODEL_UNAVAILABLE, turn_stream
from campus_agent.base.errors import CAMPUS_TOKEN_EXPIRED, DOWNSTREAM
from demo_app.catalog import demo_mcp_config
from demo_app.mcp import DEMO_MCP_NAME, NOW_ENV
from demo_app.mcp.server import server as demo_mcp_server
from demo_app.subagents.canteen import canteen_answer
from demo_app.subagents.catalog import DEMO_SUBAGENTS
from demo_app.subagents.course import course_answer
from demo_app.subagents.library_a2a import LIBRARY_DESCRIPTION
from subagents_app.client import (
    CONNECT_FAILED_NOTICE,
    CONNECT_FAILED_TEXT,
    HTTP_ERROR_NOTICE,
    HTTP_ERROR_TEXT,
    TOKEN_EXPIRED_NOTICE,
    subagent_client_close,
)
from subagents_app.models import SubAgent
from testkit.subagents.contract_agent import CHART, EXPIRED_MESSAGE, answer_chunks

CTX = RunContext(request_id="0123456789abcdef", conversation_id="conv-7", user_id=1,
                 campus_token="campus-secret-token-0001")
EMPTY_SCHEMA = {"type": "object", "properties": {}}


def sub_agent_tool(name: str, description: str | None = None) -> SubAgentTool:
    """The runtime's own tool object for a sub-agent row (unsaved: the matcher reads no DB)."""
    row = SubAgent(name=name, description=description or DEMO_SUBAGENTS[name].description)
    return SubAgentTool(sub_agent=row)  # it names itself by the runtime's rule


def mcp_tool(service: str, name: str, description: str, schema: dict | None = None) -> McpTool:
    info = McpToolInfo(name=name, description=description, input_schema=schema or EMPTY_SCHEMA)
    return McpTool(service=McpService(name=service), info=info)


async def demo_catalog_tools() -> list:
    """The demo sub-agents plus the demo MCP server's tools, as the runtime builds them."""
    listed = await demo_mcp_server.list_tools()
    return [sub_agent_tool("canteen"), sub_agent_tool("course")] + [
        mcp_tool(DEMO_MCP_NAME, t.name, t.description, t.input_schema) for t in listed
    ]


# --- the matcher (pure functions) ------------------------------------------------------------


def test_descriptions_split_into_keywords_on_chinese_and_ascii_punctuation():
    words = keyword_candidates(text="食堂助手：菜单、吃什么，营业时间;早餐 / Canteen menu。关键词：食")
    assert {"食堂助手", "菜单", "吃什么", "营业时间", "早餐", "canteen", "menu"} <= words
    assert "食" not in words  # one character matches too much
    assert "关键词" not in words  # says nothing about the topic


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        # the examples docs/demo.md promises
        ("二食堂晚饭有什么便宜的", "call_canteen"),
        ("李明老师的课还有名额吗", "call_course"),
        ("期末考试是什么时候", "campus-calendar__academic_calendar"),
        ("今天中午吃啥", "call_canteen"),
        ("想减肥，一食堂早餐热量", "call_canteen"),
        ("清真食堂几点开门？", "call_canteen"),
        ("周三有什么课", "call_course"),
        ("有哪些两学分的通识课", "call_course"),
        ("今天星期几", "campus-calendar__current_time"),
        # "选课" is a course keyword, but "什么时候" makes it a calendar question.
        ("什么时候开始选课", "campus-calendar__academic_calendar"),
    ],
)
async def test_demo_questions_route_to_the_right_tool(question, expected):
    match = tool_match(question=question, tools=await demo_catalog_tools())
    assert match is not None and match.tool.name == expected, match


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("What's for lunch at the canteen?", "call_canteen"),
        ("Which canteen has the cheapest dinner?", "call_canteen"),
        ("How many calories are in breakfast at the halal canteen", "call_canteen"),
        ("course selection", "call_course"),
        ("Are there seats left in Professor Li's classes?", "call_course"),
        ("When does the library close on weekends?", "call_library"),
        ("When are the final exams?", "campus-calendar__academic_calendar"),
        ("When does the winter vacation start?", "campus-calendar__academic_calendar"),
        ("What day is it today?", "campus-calendar__current_time"),
    ],
)
async def test_english_questions_route_to_the_right_demo_tool(question, expected):
    """Issue 42: keyword routing knew only Chinese words; the demo catalog's descriptions carry
    English keywords too, matched as whole words with or without a plural ending."""
    tools = [*await demo_catalog_tools(), sub_agent_tool("library", LIBRARY_DESCRIPTION)]
    match = tool_match(question=question, tools=tools)
    assert match is not None and match.tool.name == expected, match


async def test_unrelated_question_matches_nothing():
    assert tool_match(question="帮我订一张去北京的火车票", tools=await demo_catalog_tools()) is None
    assert tool_match(question="", tools=await demo_catalog_tools()) is None


def test_longer_and_rarer_keywords_win():
    canteen = sub_agent_tool("canteen", "食堂、菜单、图书馆")
    library = sub_agent_tool("library", "图书馆、借书、开放时间")
    # 图书馆 is shared (counts half for each); 开放时间 is the library's alone.
    assert tool_match(question="图书馆开放时间", tools=[canteen, library]).tool is library
    # "一食堂" also contains the shorter keyword "食堂": only the longer one counts.
    match = tool_match(question="一食堂菜单", tools=[sub_agent_tool("canteen", "一食堂、食堂、菜单")])
    assert match.keywords == ("一食堂", "菜单")


def test_ties_break_the_same_way_whatever_the_order():
    mcp = mcp_tool("menus", "today", "菜单")
    second = sub_agent_tool("zcanteen", "菜单")
    first = sub_agent_tool("canteen", "菜单")
    for tools in ([mcp, second, first], [first, second, mcp], [second, mcp, first]):
        assert tool_match(question="今天的菜单", tools=tools).tool is first


def test_ascii_keywords_match_whole_words_only():
    clock = mcp_tool("clock", "time", "time")
    assert tool_match(question="sometimes I wonder", tools=[clock]) is None
    assert tool_match(question="what TIME is it", tools=[clock]).tool is clock


def _schema(required=(), **properties) -> dict:
    return {"type": "object", "properties": properties, "required": list(required)}


STRING = {"type": "string"}


def test_fallback_calls_only_with_arguments_it_can_supply():
    assert tool_fallback_args(tool=sub_agent_tool("canteen"), question="吃啥") == {"message": "吃啥"}
    assert tool_fallback_args(tool=mcp_tool("cal", "now", "现在几点"), question="几点") == {}
    # issue 20 #14: a text parameter gets the question, a filter the keywords it matched
    optional = mcp_tool("cal", "list", "校历", _schema(keyword=STRING))
    assert tool_fallback_args(tool=optional, question="期末考试是什么时候", keywords=("期末考试", "什么时候")) == {
        "keyword": "期末考试 什么时候"}
    assert tool_fallback_args(tool=optional, question="校历") == {"keyword": "校历"}
    for name in ("query", "q", "question", "text"):
        tool = mcp_tool("s", "find", "搜索", _schema(**{name: STRING, "limit": {"type": "integer"}}))
        assert tool_fallback_args(tool=tool, question="图书馆几点开门") == {name: "图书馆几点开门"}
    # a single required string, whatever its name, gets the question
    assert tool_fallback_args(tool=mcp_tool("s", "x", "x", _schema(["words"], words=STRING)), question="几点") == {
        "words": "几点"}
    # never guessed: a date, an id, a string with a format or an enum, a number, two required
    for schema in (_schema(["date"], date=STRING), _schema(["course_id"], course_id=STRING),
                   _schema(["when"], when={"type": "string", "format": "date"}),
                   _schema(["kind"], kind={"type": "string", "enum": ["a", "b"]}),
                   _schema(["n"], n={"type": "integer"}), _schema(["a", "b"], a=STRING, b=STRING)):
        assert tool_fallback_args(tool=mcp_tool("cal", "x", "第几周", schema), question="第几周") is None, schema


def test_capabilities_list_sub_agents_first_from_their_descriptions():
    now = mcp_tool("aaa", "now", "当前时间：现在几点。无需参数。")
    tools = [now, sub_agent_tool("course"), sub_agent_tool("canteen")]
    text = capabilities_text(tools=tools)
    lines = text.removeprefix(str(CAPABILITIES_HEADER)).splitlines()
    assert lines[0] == "- " + DEMO_SUBAGENTS["canteen"].description.split("。")[0] + "。"
    assert lines[1].startswith("- 选课助手（演示）") and lines[2] == "- 当前时间：现在几点。"


def test_an_english_student_is_offered_english_keywords_and_told_whether_a_model_exists():
    """Issue 42: the no-match answer suggested Chinese keywords to an English student, and "once
    the AI model is back" when none was ever set up."""
    now = mcp_tool("aaa", "now", "当前时间：现在几点。")
    tools = [now, sub_agent_tool("canteen")]
    with translation.override("en"):
        unconfigured = capabilities_text(tools=tools, configured=False)
        down = capabilities_text(tools=tools, configured=True)
        footers = str(UNCONFIGURED_CAPABILITIES_FOOTER), str(CAPABILITIES_FOOTER)
    lines = unconfigured.splitlines()
    assert lines[1] == "- 食堂助手（演示）: canteen, cafeteria, dining, menu, food, eat, breakfast, lunch"
    assert lines[2] == "- 当前时间：现在几点。"  # no English keywords: its own sentence
    assert unconfigured.endswith(footers[0]) and footers[0].endswith("once an AI model is set up you can ask anything.")
    assert down.endswith(footers[1]) and footers[1].endswith("once the AI model is back you can ask anything.")
    chinese = capabilities_text(tools=tools, configured=False)
    assert chinese.splitlines()[1].startswith("- 食堂助手（演示）：查询各食堂的菜单")
    assert chinese.endswith("管理员配置 AI 模型后可以直接提问。")


# --- whole turns through turn_stream ----------------------------------------------------------


@pytest.fixture
def warnings_logged():
    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(str(message)), level="WARNING", format="{message}")
    yield lines
    logger.remove(sink)


@pytest.fixture
async def _close_shared_clients(mcp_pool_cleanup):
    yield
    await subagent_client_close()


async def collect(agent, question: str) -> list:
    history = [{"role": "user", "content": question}]
    return [event async for event in turn_stream(agent=agent, history=history, ctx=CTX)]


def demo_sub_agents(base: str) -> list[SubAgent]:
    return [
        SubAgent.objects.create(name=d.name, description=d.description, domain=d.domain,
                                base_url=f"{base}/demo/subagents/{d.name}", timeout_sec=5)
        for d in DEMO_SUBAGENTS.values()
    ]


def kinds(events) -> list[str]:
    return [type(event).__name__ for event in events]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("question", "tool", "label", "answer"),
    [
        ("今天中午一食堂吃啥", "call_canteen", "食堂助手（演示）", canteen_answer),
        ("王芳老师的课还有名额吗", "call_course", "选课助手（演示）", course_answer),
    ],
)
async def test_no_model_configured_routes_to_the_demo_sub_agent(
    settings, live_asgi, agent_factory, warnings_logged, _close_shared_clients, question, tool, label, answer
):
    settings.LLM_BASE_URL = ""
    rows = await sync_to_async(demo_sub_agents)(live_asgi)
    agent = await sync_to_async(agent_factory)(sub_agents=rows)

    events = await collect(agent, question)

    expected = answer(message=question)
    notice = UNCONFIGURED_NOTICE.format(tool=label)
    assert kinds(events)[:2] == ["Chunk", "ToolCall"] and kinds(events)[-2:] == ["ToolResult", "Done"]
    assert events[0] == Chunk(notice, fallback=True)
    call = events[1]
    assert (call.tool, json.loads(call.args)) == (tool, {"message": question})
    # The sub-agent's text is the answer: streamed as answer text while it comes, not in the chip.
    live = events[2:-2]
    assert len(live) > 3 and all(isinstance(e, Chunk) and e.fallback for e in live)
    assert "".join(e.content for e in live) == expected.full_text
    assert not any(isinstance(e, ToolChunk) for e in events)
    assert events[-2] == ToolResult(call_id=call.call_id, tool=tool, ok=True, content=expected.full_text,
                                    chart=expected.chart)
    done = events[-1]
    assert done == Done(full_text=notice + expected.full_text, chart=expected.chart, fallback=True)
    # the stream shows the fallback on its frames
    assert events[0].frame()["fallback"] is True
    assert done.frame(message_id="m1")["fallback"] is True and done.frame(message_id="m1")["chart"] == expected.chart
    assert any(f"fallback routing: reason=LLM_BASE_URL is not set tool={tool}" in line for line in warnings_logged)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("fault", ["http500", "http429", "refused"])
async def test_model_failing_before_any_text_routes_to_the_sub_agent(
    settings, llm_settings, agent, subagent_server, warnings_logged, _close_shared_clients, fault
):
    llm = llm_settings
    if fault == "refused":
        settings.LLM_BASE_URL = f"http://127.0.0.1:{_closed_port()}/v1"
    else:
        llm.fail(int(fault.removeprefix("http")))
    question = "今天中午吃什么"  # "吃什么" is one of the contract sub-agent's keywords

    events = await collect(agent, question)

    if fault != "refused":
        assert len(llm.requests) == 1  # the model was really asked (and failed)
    answer = "".join(answer_chunks(question))
    assert [e.content for e in events if isinstance(e, Chunk)][1:] == answer_chunks(question)
    assert subagent_server.last_request.body == {"message": question, "domain": "canteen"}
    assert subagent_server.last_request.headers["authorization"] == f"Bearer {CTX.campus_token}"
    notice = events[0].content
    assert events[-1] == Done(full_text=notice + answer, chart=CHART, fallback=True)
    reason = {"refused": "APIConnectionError", "http500": "InternalServerError", "http429": "RateLimitError"}[fault]
    assert any("fallback routing: reason=" in line and reason in line and "tool=call_canteen" in line
               for line in warnings_logged), warnings_logged


@pytest.mark.django_db(transaction=True)
async def test_failing_sub_agent_is_relayed_as_a_failed_tool_and_its_text(
    settings, agent, subagent_server, _close_shared_clients
):
    settings.LLM_BASE_URL = ""
    subagent_server.default_mode = "http500"
    events = await collect(agent, "今天吃什么")
    failed = HTTP_ERROR_NOTICE.format(label="食堂助手")  # what the student reads
    result = next(e for e in events if isinstance(e, ToolResult))
    assert (result.ok, result.error, result.content) == (False, failed, HTTP_ERROR_TEXT.format(status=500))
    # said once, by its error frame (the red box), not again as the answer (issue 20 #11)
    assert events[-2:] == [Error(50001, failed), Done(full_text=events[0].content, fallback=True)]
    assert _said(events, failed) == 1


@pytest.mark.django_db(transaction=True)
async def test_unreachable_sub_agent_answers_the_student_in_chinese_not_with_the_exception(
    settings, agent, _close_shared_clients
):
    settings.LLM_BASE_URL = ""
    await SubAgent.objects.filter(name="canteen").aupdate(base_url=f"http://127.0.0.1:{_closed_port()}")
    events = await collect(agent, "今天吃什么")
    notice = CONNECT_FAILED_NOTICE.format(label="食堂助手")
    result = next(e for e in events if isinstance(e, ToolResult))
    assert (result.ok, result.error) == (False, notice)
    assert result.content.startswith(CONNECT_FAILED_TEXT.format(reason=""))  # the reason, for the record
    assert events[-2:] == [Error(DOWNSTREAM, notice), Done(full_text=events[0].content, fallback=True)]
    assert _said(events, notice) == 1  # issue 20 #11: the red box only, not the answer text too


@pytest.mark.django_db(transaction=True)
async def test_a_sub_agent_outlasting_the_turn_budget_is_cut_with_a_failed_result(
    settings, agent, subagent_server, _close_shared_clients
):
    settings.LLM_BASE_URL = ""
    # Long enough for the call to connect and the first chunk to come on a loaded machine (0.5 s
    # was not, once under CI's load); the sub-agent's own timeout (3 s) is longer still.
    settings.TURN_BUDGET_SEC = 2.0
    subagent_server.default_mode = "trickle"  # a chunk every 0.2 s, forever
    events = await collect(agent, "今天吃什么")
    live = [e.content for e in events if isinstance(e, Chunk)][1:-1]
    assert live and set(live) == {"…"}  # its text was streamed as the answer until the cut
    result = next(e for e in events if isinstance(e, ToolResult))
    assert (result.ok, result.error) == (False, TURN_TIMEOUT_TEXT)
    tail = "\n\n" + TURN_TIMEOUT_TEXT  # no error frame says it: the answer does, once
    assert events[-2:] == [Chunk(tail, fallback=True),
                           Done(full_text=events[0].content + "".join(live) + tail, fallback=True)]
    assert _said(events, TURN_TIMEOUT_TEXT) == 1


@pytest.mark.django_db(transaction=True)
async def test_expired_campus_token_is_surfaced_as_in_the_tool_loop(settings, agent, subagent_server,
                                                                   _close_shared_clients):
    settings.LLM_BASE_URL = ""
    subagent_server.default_mode = "expired"
    events = await collect(agent, "食堂菜单")
    assert Error(CAMPUS_TOKEN_EXPIRED, TOKEN_EXPIRED_NOTICE) in events
    assert EXPIRED_MESSAGE in next(e for e in events if isinstance(e, ToolResult)).content  # kept for the record
    assert isinstance(events[-1], Done) and events[-1].fallback


@pytest.mark.django_db(transaction=True)
async def test_no_match_lists_what_the_assistant_can_do(settings, agent, subagent_server, _close_shared_clients):
    settings.LLM_BASE_URL = ""
    events = await collect(agent, "帮我订一张火车票")
    text = UNCONFIGURED_NO_MATCH_NOTICE + CAPABILITIES_HEADER + "- 食堂助手：食堂、菜单、吃什么、饭菜、营业时间。"
    assert events[0] == Chunk(events[0].content, fallback=True) and events[0].content.startswith(text)
    assert events[0].content.endswith(str(UNCONFIGURED_CAPABILITIES_FOOTER))  # none to come back
    assert events[-1] == Done(full_text=events[0].content, fallback=True)
    assert not any(isinstance(e, ToolCall) for e in events)
    assert subagent_server.requests == []


@pytest.mark.django_db(transaction=True)
async def test_a_model_that_is_down_will_be_back(llm_settings, agent, subagent_server, _close_shared_clients):
    llm_settings.fail(500)
    events = await collect(agent, "帮我订一张火车票")
    assert events[0].content.startswith(str(NO_MATCH_NOTICE + CAPABILITIES_HEADER))
    assert events[0].content.endswith(str(CAPABILITIES_FOOTER))


@pytest.mark.django_db(transaction=True)
async def test_what_keyword_routing_did_not_read_is_said_once(settings, agent, subagent_server,
                                                             _close_shared_clients):
    """Issue 42: without a model the attachments were silently ignored (worse: their text was
    matched and sent as the question) and a follow-up lost its context without a word."""
    settings.LLM_BASE_URL = ""
    attached = [{"type": "text", "text": "那清真食堂呢？"},
                {"type": "text", "text": "附件《通知.txt》的内容：\n图书馆周末闭馆"}]
    history = [{"role": "user", "content": "二食堂午饭吃什么"}, {"role": "assistant", "content": "红烧肉。"},
               {"role": "user", "content": attached}]
    events = [event async for event in turn_stream(agent=agent, history=history, ctx=CTX)]
    call = next(e for e in events if isinstance(e, ToolCall))
    assert json.loads(call.args) == {"message": "那清真食堂呢？"}  # the student's words, not the file's
    notice = UNCONFIGURED_NOTICE.format(tool="食堂助手") + ATTACHMENTS_UNREAD_NOTE + FOLLOW_UP_NOTE
    assert events[0] == Chunk(str(notice), fallback=True) and events[-1].full_text.startswith(str(notice))

    # Said once a conversation: the next follow-up (no attachment) says nothing more, in either language.
    for language in ("zh-hans", "en"):
        with translation.override(language):
            later = history + [{"role": "assistant", "content": events[-1].full_text},
                               {"role": "user", "content": "清真食堂晚饭呢"}]
            again = [event async for event in turn_stream(agent=agent, history=later, ctx=CTX)]
            assert again[0] == Chunk(str(UNCONFIGURED_NOTICE.format(tool="食堂助手")), fallback=True)


@pytest.mark.django_db(transaction=True)
async def test_routes_to_a_demo_mcp_tool_without_required_arguments(settings, agent_factory, _close_shared_clients):
    settings.LLM_BASE_URL = ""
    config = demo_mcp_config()
    config["env"] = config.get("env", {}) | {NOW_ENV: "2026-11-30T12:05:00+08:00"}  # keeps its PYTHONPATH
    service = await McpService.objects.acreate(name=DEMO_MCP_NAME, protocol="stdio", config=config, timeout_sec=10)
    agent = await sync_to_async(agent_factory)(mcp_services=[service])

    events = await collect(agent, "今天星期几？")

    call = next(e for e in events if isinstance(e, ToolCall))
    assert (call.tool, call.args) == ("campus-calendar__current_time", "{}")
    assert events[0] == Chunk(UNCONFIGURED_NOTICE.format(tool="当前时间"), fallback=True)
    answer = "现在是北京时间 12:05，2026年11月30日（星期一）是2026–2027 学年秋季学期第 13 教学周。"
    assert events[-1].full_text == UNCONFIGURED_NOTICE.format(tool="当前时间") + answer
    assert events[-1].fallback and events[-1].chart is None


@pytest.mark.django_db(transaction=True)
async def test_a_tool_with_one_text_argument_gets_the_question(settings, agent_factory, mcp_service_stdio,
                                                               _close_shared_clients):
    settings.LLM_BASE_URL = ""
    agent = await sync_to_async(agent_factory)(mcp_services=[mcp_service_stdio])
    events = await collect(agent, "echo 你好")  # the name of tools__echo, which needs `text`
    call = next(e for e in events if isinstance(e, ToolCall))
    assert (call.tool, json.loads(call.args)) == ("tools__echo", {"text": "echo 你好"})
    assert events[-1].full_text.endswith("echo 你好") and events[-1].fallback


@pytest.mark.django_db(transaction=True)
async def test_a_tool_needing_other_arguments_is_never_guessed(settings, agent_factory, mcp_service_stdio,
                                                               _close_shared_clients):
    settings.LLM_BASE_URL = ""
    agent = await sync_to_async(agent_factory)(mcp_services=[mcp_service_stdio])
    events = await collect(agent, "add")  # the name of tools__add, which needs two integers
    assert not any(isinstance(e, ToolCall) for e in events)
    assert events[0].content.startswith(str(UNCONFIGURED_NO_MATCH_NOTICE + CAPABILITIES_HEADER))
    assert "- " in events[0].content and events[-1].fallback


@pytest.mark.django_db(transaction=True)
async def test_a_calendar_question_gets_the_matching_lines_of_the_demo_calendar(settings, agent_factory,
                                                                                 _close_shared_clients):
    """Issue 20 #14: "期末考试是什么时候" used to call academic_calendar with `{}` (all 16 lines)."""
    settings.LLM_BASE_URL = ""
    config = demo_mcp_config()
    config["env"] = config.get("env", {}) | {NOW_ENV: "2026-11-30T12:05:00+08:00"}
    service = await McpService.objects.acreate(name=DEMO_MCP_NAME, protocol="stdio", config=config, timeout_sec=10)
    agent = await sync_to_async(agent_factory)(mcp_services=[service])

    events = await collect(agent, "期末考试是什么时候")

    call = next(e for e in events if isinstance(e, ToolCall))
    assert call.tool == "campus-calendar__academic_calendar"
    assert json.loads(call.args) == {"keyword": "什么时候 期末考试"}  # the keywords it matched
    lines = events[-1].full_text.split("\n")
    exams = [line for line in lines if line.startswith("- ")]
    assert [line.split("：")[0] for line in exams] == ["- 秋季学期期末考试", "- 春季学期期末考试"]
    assert exams[0].endswith("还有 42 天")


@pytest.mark.django_db(transaction=True)
async def test_a_slow_sub_agent_is_streamed_as_the_answer_while_it_answers(settings, agent, subagent_server,
                                                                           _close_shared_clients):
    """Issue 20 #13: its first words reach the student as answer text while it is still
    answering, not only with its result."""
    settings.LLM_BASE_URL = ""
    subagent_server.default_mode = "held"  # the first chunk, then nothing until released
    question = "今天吃什么"
    history = [{"role": "user", "content": question}]
    seen = []
    async with aclosing(turn_stream(agent=agent, history=history, ctx=CTX)) as events:
        async for event in events:
            seen.append(event)
            if isinstance(event, Chunk) and len([e for e in seen if isinstance(e, Chunk)]) == 2:
                # the sub-agent is holding the rest of its answer: this came while it answers
                assert event == Chunk(answer_chunks(question)[0], fallback=True)
                assert not any(isinstance(e, ToolResult) for e in seen)
                subagent_server.release.set()
    assert subagent_server.release.is_set()
    answer = "".join(answer_chunks(question))
    assert "".join(e.content for e in seen if isinstance(e, Chunk)) == seen[0].content + answer
    assert seen[-1] == Done(full_text=seen[0].content + answer, fallback=True)


def _said(events, sentence: str) -> int:
    """How many times the student is shown `sentence` as text: answer chunks and error frames."""
    sentence = str(sentence)
    return sum(e.content.count(sentence) for e in events if isinstance(e, Chunk)) + sum(
        e.message.count(sentence) for e in events if isinstance(e, Error))


@pytest.mark.django_db(transaction=True)
async def test_switched_off_answers_with_the_model_error(settings, agent, subagent_server, _close_shared_clients):
    settings.LLM_BASE_URL = ""
    settings.KEYWORD_FALLBACK_ENABLED = False
    events = await collect(agent, "今天中午吃啥")
    assert events == [Error(DOWNSTREAM, MODEL_UNAVAILABLE), Done(full_text="", interrupted=True)]
    assert subagent_server.requests == []
