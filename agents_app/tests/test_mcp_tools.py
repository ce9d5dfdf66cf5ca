"""MCP tools through the real loop, against MCP servers built with the mcp SDK."""
import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings as django_settings

from agents_app.access import EVERYONE
from agents_app.mcp import pool as pool_module
from agents_app.mcp.tools import CALL_TIMEOUT_TEXT, IS_ERROR_TEXT
from agents_app.models import McpService
from agents_app.runtime.context import RunContext
from agents_app.runtime.events import ToolResult
from agents_app.runtime.loop import run_turn
from agents_app.runtime.tools import tools_for_agent
from testkit.mcp.servers import SPAWN_LOG_ENV

pytestmark = pytest.mark.django_db(transaction=True)

CTX = RunContext(request_id="fedcba9876543210", conversation_id="conv-7", campus_token="campus-secret-token-0002")


@pytest.fixture(autouse=True)
def _pool(mcp_pool_cleanup):
    return mcp_pool_cleanup


async def turn(agent, llm, *calls, answer="好的"):
    """One turn in which the model calls `calls`, then answers; returns the tool results."""
    llm.reply_tool_calls(*calls)
    llm.reply_text(answer)
    events = [e async for e in run_turn(agent=agent, history=[{"role": "user", "content": "算一下"}], ctx=CTX)]
    return [e for e in events if isinstance(e, ToolResult)]


@pytest.fixture
def make_agent(agent_factory):
    return sync_to_async(lambda *services: agent_factory(mcp_services=list(services)))


async def test_tool_answers_over_each_transport(any_mcp_service, make_agent, llm_settings):
    agent = await make_agent(any_mcp_service)
    prefix = any_mcp_service.name
    [result] = await turn(agent, llm_settings, (f"{prefix}__add", {"a": 2, "b": 40}))
    assert (result.ok, result.content) == (True, "42")
    offered = {t["function"]["name"]: t["function"] for t in llm_settings.requests[0].tools}
    add = offered[f"{prefix}__add"]
    assert add["parameters"]["type"] == "object" and set(add["parameters"]["required"]) == {"a", "b"}
    assert add["description"].startswith("把两个整数相加")
    assert llm_settings.requests[1].messages[-1]["content"] == "42"


async def test_second_turn_starts_no_new_stdio_process(mcp_service_stdio, mcp_spawn_log, make_agent, llm_settings):
    agent = await make_agent(mcp_service_stdio)
    [first] = await turn(agent, llm_settings, ("tools__pid", {}))
    [second] = await turn(agent, llm_settings, ("tools__pid", {}))
    assert first.content == second.content
    assert mcp_spawn_log.read_text().split() == [first.content]


async def test_is_error_is_not_ok_and_non_text_parts_are_described(mcp_service_stdio, make_agent, llm_settings):
    agent = await make_agent(mcp_service_stdio)
    failed, picture = await turn(agent, llm_settings, ("tools__fail", {"message": "余额不足"}), ("tools__picture", {}))
    if failed.tool != "tools__fail":
        failed, picture = picture, failed
    assert not failed.ok and "余额不足" in failed.content
    assert failed.error == IS_ERROR_TEXT.format(tool="tools__fail")
    assert picture.ok and picture.content.startswith("这是一张图\n[图片 image/png")


async def test_stdio_server_gets_a_minimal_environment(mcp_service_stdio, make_agent, llm_settings, monkeypatch):
    monkeypatch.setenv("SECRET_KEY", "gateway-secret")
    monkeypatch.setenv("DATABASE_URL", "postgres://u:p@db/campus")
    agent = await make_agent(mcp_service_stdio)
    [result] = await turn(agent, llm_settings, ("tools__env_keys", {}))
    keys = set(result.content.split(","))
    assert SPAWN_LOG_ENV in keys and "PATH" in keys
    assert not keys & {"SECRET_KEY", "DATABASE_URL", "LLM_API_KEY", "DJANGO_SETTINGS_MODULE"}


async def test_stdio_server_starts_in_a_dedicated_empty_directory(make_agent, llm_settings):
    """Not the project directory, where `.env` would be readable by a relative path."""
    service = await McpService.objects.acreate(
        name="tools",
        protocol="stdio",
        config={
            "command": sys.executable,
            "args": ["-m", "testkit.mcp.servers"],
            "env": {"PYTHONPATH": str(django_settings.BASE_DIR)},  # no "cwd"
        },
        timeout_sec=5,
    )
    agent = await make_agent(service)
    [result] = await turn(agent, llm_settings, ("tools__workdir", {}))
    workdir = json.loads(result.content)
    assert Path(workdir["cwd"]) != Path(django_settings.BASE_DIR).resolve()
    assert Path(workdir["cwd"]).name.startswith("campus-agent-mcp-")
    assert workdir["entries"] == []


async def test_stdio_server_starts_in_the_configured_cwd(mcp_service_stdio, make_agent, llm_settings):
    [result] = await turn(await make_agent(mcp_service_stdio), llm_settings, ("tools__workdir", {}))
    assert Path(json.loads(result.content)["cwd"]) == Path(mcp_service_stdio.config["cwd"]).resolve()


async def test_a_dead_stdio_server_is_replaced_on_the_next_call(mcp_service_stdio, mcp_spawn_log, make_agent,
                                                                llm_settings):
    agent = await make_agent(mcp_service_stdio)
    [first] = await turn(agent, llm_settings, ("tools__pid", {}))
    os.kill(int(first.content), signal.SIGKILL)
    await asyncio.sleep(0.2)
    [second] = await turn(agent, llm_settings, ("tools__pid", {}))
    assert second.ok and second.content != first.content
    assert mcp_spawn_log.read_text().split() == [first.content, second.content]


async def test_each_call_is_bounded_by_the_service_timeout(mcp_service_http, make_agent, llm_settings):
    await McpService.objects.filter(pk=mcp_service_http.pk).aupdate(timeout_sec=1)
    agent = await make_agent(mcp_service_http)
    started = time.perf_counter()
    [result] = await turn(agent, llm_settings, ("http-tools__slow", {"seconds": 5}))
    assert not result.ok and result.content == CALL_TIMEOUT_TEXT.format(tool="http-tools__slow", timeout=1)
    assert time.perf_counter() - started < 1 + 1


async def test_tool_list_is_cached_until_the_service_is_saved(mcp_service_http, mcp_http_server, make_agent,
                                                              llm_settings):
    agent = await make_agent(mcp_service_http)
    assert "http-tools__add" in [t.name for t in await tools_for_agent(agent, audience=EVERYONE)]
    mcp_http_server.stop()
    # Served from the cache: the (now stopped) server is not asked again.
    assert "http-tools__add" in [t.name for t in await tools_for_agent(agent, audience=EVERYONE)]
    service = await McpService.objects.aget(pk=mcp_service_http.pk)
    await sync_to_async(service.save)()  # what admin does; the signal drops the cached list
    assert [t.name for t in await tools_for_agent(agent, audience=EVERYONE)] == []  # unreachable now: left out


async def test_names_stay_unique_when_two_services_normalise_alike(mcp_sse_server, mcp_http_server, make_agent,
                                                                   llm_settings):
    first = await McpService.objects.acreate(name="Campus.Tools", protocol="sse", config={"url": mcp_sse_server.url})
    second = await McpService.objects.acreate(
        name="campus_tools", protocol="streamable-http", config={"url": mcp_http_server.url}
    )
    agent = await make_agent(first, second)
    names = [t.name for t in await tools_for_agent(agent, audience=EVERYONE)]
    assert len(names) == len(set(names)) == 44  # 22 tools each
    assert {"campus_tools__add", "campus_tools__add_2"} <= set(names)
    results = await turn(agent, llm_settings, ("campus_tools__add", {"a": 1, "b": 1}),
                         ("campus_tools__add_2", {"a": 2, "b": 2}))
    assert sorted(r.content for r in results) == ["2", "4"]


async def test_an_unreachable_service_is_left_out_and_the_others_still_work(
    mcp_service_stdio, make_agent, llm_settings, unused_tcp_port
):
    down = await McpService.objects.acreate(
        name="down", protocol="streamable-http", config={"url": f"http://127.0.0.1:{unused_tcp_port}/mcp"},
        timeout_sec=1,
    )
    agent = await make_agent(mcp_service_stdio, down)
    [result] = await turn(agent, llm_settings, ("tools__echo", {"text": "还在"}))
    assert result.content == "还在"
    assert not any(n.startswith("down__") for n in llm_settings.requests[0].tool_names)


async def test_a_hanging_service_costs_one_timeout_then_is_skipped_at_once(make_agent, llm_settings):
    import socket

    # Accepts connections (the kernel's backlog) but never answers: the worst kind of down.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        hanging = await McpService.objects.acreate(
            name="hanging", protocol="streamable-http", config={"url": f"http://127.0.0.1:{port}/mcp"}, timeout_sec=1
        )
        agent = await make_agent(hanging)
        problems: list[str] = []
        started = time.perf_counter()
        assert await tools_for_agent(agent, audience=EVERYONE, problems=problems) == []
        first = time.perf_counter() - started
        started = time.perf_counter()
        assert await tools_for_agent(agent, audience=EVERYONE, problems=problems) == []
        second = time.perf_counter() - started
    # The second listing does not wait for the service again: well under its 1 s timeout (a
    # loaded CI machine took 0.28 s to skip it, so the bound is the timeout's half, not 0.2 s).
    assert 0.9 < first < 1 + 1 and second < 0.5
    assert "连接超时" in problems[0] and "秒后重试连接" in problems[1]


async def test_a_session_left_idle_is_closed_when_the_pool_is_next_used(
    mcp_service_stdio, mcp_service_http, make_agent, llm_settings, monkeypatch
):
    agent = await make_agent(mcp_service_stdio)
    [first] = await turn(agent, llm_settings, ("tools__pid", {}))
    pid = int(first.content)
    monkeypatch.setattr(pool_module, "IDLE_CLOSE_SEC", 0.2)  # instead of waiting ten minutes
    await asyncio.sleep(0.3)
    await sync_to_async(agent.mcp_services.set)([mcp_service_http])  # `tools` taken off the agent
    [other] = await turn(agent, llm_settings, ("http-tools__add", {"a": 1, "b": 2}))
    assert other.ok
    await pool_module.mcp_pool().retired_wait()  # the idle session was retired by that turn: closed now
    assert not _running(pid)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # an exited child not yet reaped is not running
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.fixture
def flood_server():
    """A hostile server's list: echo, a 1 MB description, a 1 MB input schema, 10,000 more tools."""
    from testkit.mcp.servers import HttpMcpServer, build_flood_server

    with HttpMcpServer("streamable-http", mcp=build_flood_server(count=10_000, huge_bytes=1_000_000)) as server:
        yield server


@pytest.fixture
def flood(flood_server) -> McpService:
    return McpService.objects.create(name="flood", protocol="streamable-http", config={"url": flood_server.url},
                                     timeout_sec=30)


def test_a_server_listing_ten_thousand_tools_gives_the_model_the_capped_list(
    live_asgi, llm_settings, agent_factory, user, flood
):
    """Every turn sent the model every tool a server listed (10,000 tools, 59 MB): now at most
    MCP_TOOLS_MAX of them, none whose description or input schema is over its cap; the rest of
    the list still serves, and the log tells staff what was left out."""
    import httpx
    from loguru import logger

    from chat_app.accounts.sessions import auth_session_create
    from chat_app.models import AuthSession
    from testkit.web.sse import read_until

    token = auth_session_create(user=user, via=AuthSession.Via.PASSWORD, roles=["student"]).access_token
    auth_headers = {"Authorization": f"Bearer {token}"}
    agent_factory(mcp_services=[flood])
    llm_settings.reply_text("好的。")
    warnings: list[str] = []
    sink = logger.add(lambda m: warnings.append(m.record["message"]), level="WARNING", format="{message}")
    try:
        with httpx.Client(base_url=live_asgi, timeout=60) as client:
            with client.stream("POST", "/api/v1/chat", json={"message": "你好"}, headers=auth_headers) as response:
                blocks, _ = read_until(response, lambda f: f["type"] == "done")
    finally:
        logger.remove(sink)
    assert blocks[-1][1]["full_text"] == "好的。"
    offered = llm_settings.requests[0].tools
    names = [tool["function"]["name"] for tool in offered]
    assert len(names) == django_settings.MCP_TOOLS_MAX == 128
    assert names[0] == "flood__echo" and names[-1] == "flood__tool_00126"
    assert len(json.dumps(offered, ensure_ascii=False).encode()) < 64 * 1024
    [line] = [line for line in warnings if "MCP tools over the caps" in line]
    assert "'huge_description'：描述 999996 字节，超过 MCP_TOOL_DESCRIPTION_MAX_BYTES（8192）" in line
    assert "'huge_schema'：参数定义" in line and "另有 9873 个工具超过数量上限 MCP_TOOLS_MAX（128）" in line


def test_staff_checking_the_service_see_which_tools_were_left_out(settings, staff_client, flood):
    from testkit.web.admin_forms import admin_action_run

    settings.MCP_TOOLS_MAX = 5
    listed, dropped = admin_action_run(staff_client, changelist="admin:agents_app_mcpservice_changelist",
                                       action="list_tools", objects=[flood])
    assert listed[0] == "success" and "共 5 个工具" in listed[1] and "flood__tool_00003" in listed[1]
    assert dropped[0] == "warning" and "没有提供给模型" in dropped[1]
    assert "'huge_description'：描述" in dropped[1] and "另有 9996 个工具超过数量上限 MCP_TOOLS_MAX（5）" in dropped[1]
