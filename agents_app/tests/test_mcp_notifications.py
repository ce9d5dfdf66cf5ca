"""What MCP servers tell the client besides their answers, against servers built with the mcp SDK
over each transport: progress (live `tool_chunk`s), their log (ours, with the request id), tool
list changes (the cached list dropped), and who the client says it is (docs/runtime.md)."""
import asyncio
import json
import subprocess
import sys
from pathlib import Path

import mcp_types as types
import pytest
from asgiref.sync import sync_to_async
from django.conf import settings as django_settings
from loguru import logger

from agents_app.mcp import notifications
from agents_app.mcp.person import person_use
from agents_app.mcp.tool_cache import mcp_tools_cached
from agents_app.mcp.tools import MAX_PROGRESS_LINES, mcp_tool_call, progress_text
from agents_app.runtime.context import RunContext
from agents_app.runtime.events import ToolChunk, ToolResult
from agents_app.runtime.loop import run_turn
from campus_agent.base.version import PRODUCT_NAME, VERSION
from testkit.mcp.servers import ADDED_TOOL, PROGRESS_MESSAGE

pytestmark = pytest.mark.django_db(transaction=True)

CTX = RunContext(request_id="0a1b2c3d4e5f6789", conversation_id="conv-notify")


@pytest.fixture(autouse=True)
def _pool(mcp_pool_cleanup):
    return mcp_pool_cleanup


@pytest.fixture
def make_agent(agent_factory):
    return sync_to_async(lambda *services: agent_factory(mcp_services=list(services)))


@pytest.fixture
def server_log():
    """The log records of MCP servers' lines (message, level, request id), as they are written."""
    records: list[tuple[str, str, str]] = []
    sink = logger.add(lambda m: records.append((m.record["message"], m.record["level"].name,
                                                m.record["extra"].get("request_id"))),
                      format="{message}", level="DEBUG", filter=lambda r: r["message"].startswith("MCP server log"))
    yield records
    logger.remove(sink)


async def turn(agent, llm, *calls, ctx=CTX):
    """One turn in which the model calls `calls`, then answers; all its events."""
    llm.reply_tool_calls(*calls)
    llm.reply_text("好的")
    return [e async for e in run_turn(agent=agent, history=[{"role": "user", "content": "查一下"}], ctx=ctx)]


def _handshake_era(monkeypatch):
    """Pins the client to the initialize handshake (2025-11-25), as an older server would."""
    from agents_app.mcp import connect

    class HandshakeClient(connect.Client):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, mode="legacy", **kwargs)

    monkeypatch.setattr(connect, "Client", HandshakeClient)


async def test_progress_shows_live_as_tool_chunks(any_mcp_service, make_agent, llm_settings):
    agent = await make_agent(any_mcp_service)
    events = await turn(agent, llm_settings, (f"{any_mcp_service.name}__progress", {"steps": 3}))
    [result] = [e for e in events if isinstance(e, ToolResult)]
    chunks = [e for e in events if isinstance(e, ToolChunk)]
    assert (result.ok, result.content) == (True, "完成 3 项")
    assert [c.content for c in chunks] == [f"{PROGRESS_MESSAGE.format(step=i)}（{i}/3）\n" for i in (1, 2, 3)]
    assert {c.call_id for c in chunks} == {result.call_id}
    # Live: every progress line came before the tool's result.
    assert max(events.index(c) for c in chunks) < events.index(result)


async def test_progress_over_the_handshake_era_too(mcp_service_http, make_agent, llm_settings, monkeypatch):
    _handshake_era(monkeypatch)
    agent = await make_agent(mcp_service_http)
    events = await turn(agent, llm_settings, ("http-tools__progress", {"steps": 2}))
    assert [e.content for e in events if isinstance(e, ToolChunk)] == [
        f"{PROGRESS_MESSAGE.format(step=i)}（{i}/2）\n" for i in (1, 2)]


def test_progress_lines():
    assert progress_text(3, 10, "正在\n查询") == "正在 查询（3/10）\n"
    assert progress_text(2, None, None) == "进度 2\n"
    assert progress_text(0.5, 1, "x" * 500) == "x" * 200 + "（0.5/1）\n"
    assert MAX_PROGRESS_LINES == 100


async def test_a_server_log_line_is_ours_with_the_request_id(any_mcp_service, make_agent, llm_settings, server_log):
    agent = await make_agent(any_mcp_service)
    await turn(agent, llm_settings, (f"{any_mcp_service.name}__server_log", {"text": "借阅库存已刷新\x1b[31m"}),
               (f"{any_mcp_service.name}__server_log", {"text": "磁盘快满了", "level": "critical"}))
    lines = {message.rsplit(" - ", 1)[1]: (level, request_id) for message, level, request_id in server_log}
    # Flattened by the log patcher (no terminal escapes from a server), at most WARNING.
    assert lines == {"借阅库存已刷新\\x1b[31m": ("INFO", CTX.request_id), "磁盘快满了": ("WARNING", CTX.request_id)}
    assert all(f"service={any_mcp_service.name} " in message for message, _, _ in server_log)


async def test_a_server_log_line_is_capped(mcp_service_stdio, make_agent, llm_settings, server_log):
    agent = await make_agent(mcp_service_stdio)
    await turn(agent, llm_settings, ("tools__server_log", {"text": "长" * 5000}))
    [(message, _, request_id)] = server_log
    assert message.endswith(" - " + "长" * notifications.MAX_SERVER_LOG_CHARS + "…")
    assert request_id == CTX.request_id


async def test_server_log_over_the_handshake_era(mcp_service_http, make_agent, llm_settings, server_log,
                                                 monkeypatch):
    _handshake_era(monkeypatch)
    agent = await make_agent(mcp_service_http)
    await turn(agent, llm_settings, ("http-tools__server_log", {"text": "旧协议的日志"}))
    assert [(m.rsplit(" - ", 1)[1], rid) for m, _, rid in server_log] == [("旧协议的日志", CTX.request_id)]


async def test_no_server_log_is_asked_for_when_the_level_is_empty(mcp_service_http, make_agent, llm_settings,
                                                                  server_log, settings):
    settings.MCP_SERVER_LOG_LEVEL = ""
    agent = await make_agent(mcp_service_http)
    events = await turn(agent, llm_settings, ("http-tools__server_log", {"text": "没人要的日志"}))
    assert [e.ok for e in events if isinstance(e, ToolResult)] == [True]
    assert server_log == []


async def _offered(agent, llm) -> set[str]:
    """The tool names the model is offered in a turn (no call)."""
    llm.reply_text("好的")
    [e async for e in run_turn(agent=agent, history=[{"role": "user", "content": "你好"}], ctx=CTX)]
    return {t["function"]["name"] for t in llm.requests[-1].tools}


async def _until(condition, timeout: float = 10.0) -> None:
    """Waits until `condition()` holds: the change notice arrives on its own stream, apart from
    the call's answer."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.02)


@pytest.mark.parametrize("era", ["default", "handshake"])
async def test_a_tool_list_change_drops_the_cached_list(any_mcp_service, make_agent, llm_settings, monkeypatch,
                                                        era):
    if era == "handshake":
        _handshake_era(monkeypatch)
    agent = await make_agent(any_mcp_service)
    added = f"{any_mcp_service.name}__{ADDED_TOOL}"
    assert added not in await _offered(agent, llm_settings)
    assert mcp_tools_cached(any_mcp_service) is not None

    events = await turn(agent, llm_settings, (f"{any_mcp_service.name}__tools_change", {}))
    assert [e.ok for e in events if isinstance(e, ToolResult)] == [True]
    await _until(lambda: mcp_tools_cached(any_mcp_service) is None)
    assert added in await _offered(agent, llm_settings)


async def test_the_server_sees_the_project_as_its_client(any_mcp_service, make_agent, llm_settings):
    agent = await make_agent(any_mcp_service)
    [result] = [e for e in await turn(agent, llm_settings, (f"{any_mcp_service.name}__client_info", {}))
                if isinstance(e, ToolResult)]
    assert json.loads(result.content) == {"name": PRODUCT_NAME, "version": VERSION}


async def test_the_handshake_names_the_project_too(mcp_service_http, make_agent, llm_settings, monkeypatch):
    _handshake_era(monkeypatch)
    agent = await make_agent(mcp_service_http)
    [result] = [e for e in await turn(agent, llm_settings, ("http-tools__client_info", {}))
                if isinstance(e, ToolResult)]
    assert json.loads(result.content) == {"name": PRODUCT_NAME, "version": VERSION}


class Answering:
    """A person (agents_app.mcp.person) who answers every form with `content`."""

    def __init__(self, content):
        self.content = content
        self.asked = []

    async def elicit(self, params):
        self.asked.append(params)
        return types.ElicitResult(action="accept", content=self.content)


@pytest.mark.parametrize("era", ["default", "handshake"])
async def test_the_calling_tasks_person_answers_an_elicitation(mcp_service_http, make_agent, llm_settings,
                                                               monkeypatch, era):
    if era == "handshake":
        _handshake_era(monkeypatch)
    agent = await make_agent(mcp_service_http)
    person = Answering({"confirmed": True})
    with person_use(person):
        [result] = [e for e in await turn(agent, llm_settings, ("http-tools__confirm", {}))
                    if isinstance(e, ToolResult)]
    expected = "answer=accept confirmed=True" + ("" if era == "handshake" else " state=round-1")
    assert (result.ok, result.content) == (True, expected)
    [asked] = person.asked
    assert asked.message and asked.requested_schema["properties"]["confirmed"]["type"] == "boolean"


async def test_an_answer_that_breaks_the_form_is_declined_not_sent(mcp_service_http, make_agent, llm_settings):
    agent = await make_agent(mcp_service_http)
    with person_use(Answering({"confirmed": "yes"})):  # not a boolean
        [result] = [e for e in await turn(agent, llm_settings, ("http-tools__confirm", {}))
                    if isinstance(e, ToolResult)]
    assert result.content == "answer=decline state=round-1"


def test_a_form_shows_the_defaults_its_schema_gives_sep_1034():
    schema = {"type": "object", "properties": {
        "name": {"type": "string", "default": "张三"}, "age": {"type": "integer", "default": 20},
        "score": {"type": "number", "default": 9.5}, "agree": {"type": "boolean", "default": False},
        "campus": {"type": "string", "enum": ["东区", "西区"], "default": "西区"},
        "days": {"type": "array", "items": {"type": "string", "enum": ["一", "二"]}, "default": ["二"]},
        "wrong_type": {"type": "integer", "default": "20"}, "not_a_choice": {"type": "string", "enum": ["a"], "default": "b"},
        "bool_as_number": {"type": "number", "default": True}, "no_default": {"type": "string"},
    }}
    assert notifications.elicitation_defaults(schema) == {"name": "张三", "age": 20, "score": 9.5, "agree": False,
                                                          "campus": "西区", "days": ["二"]}
    assert notifications.elicitation_defaults({"properties": "x"}) == {} == notifications.elicitation_defaults([])
    problem = notifications.elicitation_content_problem
    form = {"properties": {"n": {"type": "integer"}, "s": {"type": "string"}}, "required": ["n"]}
    assert problem(form, {"n": 3, "s": "x"}) is None
    assert "required" in problem(form, {"s": "x"})
    assert "not asked" in problem(form, {"n": 3, "extra": 1})
    assert problem(form, {"n": True}) and problem(form, {"n": 3, "s": "x" * 2001}) and problem(form, [])


@pytest.mark.parametrize("era", ["default", "handshake"])
async def test_an_elicitation_nobody_can_answer_is_declined(mcp_service_http, monkeypatch, era):
    """A call made with no person at hand (not a turn's: a turn waits for the student,
    test_mcp_elicitation_turns.py): the server hears a decline, the call goes on."""
    if era == "handshake":
        _handshake_era(monkeypatch)

    async def emit(text):
        pass

    result = await mcp_tool_call(service=mcp_service_http, tool="confirm", args={}, shown_as="confirm", emit=emit)
    # On 2026-07-28 the answer comes with the retry, beside the state the server handed out.
    expected = "answer=decline" if era == "handshake" else "answer=decline state=round-1"
    assert (result.ok, result.text) == (True, expected)


def test_the_conformance_client_lists_through_the_project(mcp_http_server):
    """scripts/mcp-conformance-client as the suite runs it (one scenario, a tiny local server);
    the whole suite runs in scripts/mcp-conformance.sh, not here."""
    script = Path(django_settings.BASE_DIR) / "scripts" / "mcp-conformance-client"
    env = {"PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin", "MCP_CONFORMANCE_SCENARIO": "initialize",
           "LOG_LEVEL": "INFO"}
    done = subprocess.run([str(script), mcp_http_server.url], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "conformance: scenario=initialize tools=[" in done.stderr and "'add'" in done.stderr
    assert done.stdout == ""  # the suite keeps stdout as its record; our log goes to stderr

    refused = subprocess.run([str(script), "http://127.0.0.1:9/mcp"], env=env, capture_output=True, text=True,
                             timeout=120)
    assert refused.returncode == 1, refused.stderr[-2000:]


def test_whose_log_line_it_is_when_the_transport_cannot_say():
    """A stdio pipe carries every call's notifications alike: only a sole call in flight is named."""
    import contextvars

    contextvars.copy_context().run(_whose_log_line)  # the request ids set here stay here


def _whose_log_line():
    from agents_app.models import McpService
    from campus_agent.base.request_id import NO_REQUEST_ID, request_id_set

    stdio = McpService(pk=9001, name="pipe", protocol=McpService.Protocol.STDIO)
    http = McpService(pk=9002, name="web", protocol=McpService.Protocol.STREAMABLE_HTTP)
    request_id_set("opener-of-the-session")
    with notifications.mcp_call_in_flight(service_id=stdio.pk, request_id="first-call-000001"):
        assert notifications._call_request_id(stdio) == "first-call-000001"
        with notifications.mcp_call_in_flight(service_id=stdio.pk, request_id="second-call-00002"):
            assert notifications._call_request_id(stdio) == NO_REQUEST_ID
    assert notifications._call_request_id(stdio) == NO_REQUEST_ID
    with notifications.mcp_call_in_flight(service_id=http.pk, request_id="first-call-000001"), \
            notifications.mcp_call_in_flight(service_id=http.pk, request_id="second-call-00002"):
        assert notifications._call_request_id(http) == NO_REQUEST_ID  # the opener's id: not a call
        request_id_set("second-call-00002")  # what the SDK's reader of that call's stream sees
        assert notifications._call_request_id(http) == "second-call-00002"
