"""The circuit breaker of sub-agents and MCP services (campus_agent/base/circuit.py), through the real
tools against the contract sub-agent and an MCP test server on loopback."""
import asyncio
import time

import pytest
from asgiref.sync import sync_to_async
from loguru import logger

from agents_app.access import EVERYONE
from agents_app.mcp.tools import CIRCUIT_OPEN_TEXT as MCP_OPEN_TEXT
from agents_app.mcp.tools import mcp_circuit_key, mcp_service_tool_infos
from agents_app.runtime.context import RunContext
from agents_app.runtime.mcp_tool import McpTool
from agents_app.runtime.subagent_tool import CIRCUIT_OPEN_TEXT, SubAgentTool
from agents_app.runtime.tools import tools_for_agent
from campus_agent.base.circuit import (
    CIRCUIT_OPEN_DESCRIPTION,
    CircuitState,
    circuit_enter,
    circuit_failure,
    circuit_status,
)

pytestmark = pytest.mark.django_db(transaction=True)

CTX = RunContext(request_id="c1rc0123456789ab", conversation_id="conv-circuit", campus_token="campus-token-0003")


async def _noop(text: str) -> None:
    return None


@pytest.fixture
def breaker_settings(settings):
    settings.CIRCUIT_FAILURES = 3
    settings.CIRCUIT_WINDOW_SEC = 60
    settings.CIRCUIT_COOLDOWN_SEC = 30
    return settings


@pytest.fixture
def state_log():
    """The breaker's log lines about state changes, as they are written."""
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(m.record["message"]), format="{message}", level="INFO",
                      filter=lambda r: r["message"].startswith("circuit "))
    yield lines
    logger.remove(sink)


@pytest.fixture
def down_agent(sub_agent_factory, subagent_server, breaker_settings):
    """A sub-agent answering HTTP 500 (the contract server's default mode), timeout 3 s."""
    subagent_server.default_mode = "http500"
    return sub_agent_factory()


async def _call(tool, message="今天吃啥"):
    started = time.perf_counter()
    outcome = await tool.run({"message": message}, CTX, _noop)
    return outcome, time.perf_counter() - started


async def _status(key):
    return await sync_to_async(circuit_status)(source=key)


async def test_opens_after_n_failures_then_refuses_at_once_without_calling(down_agent, subagent_server, state_log):
    tool = SubAgentTool(sub_agent=down_agent)
    for _ in range(3):
        outcome, _ = await _call(tool)
        assert not outcome.ok and outcome.error != CIRCUIT_OPEN_TEXT
    assert len(subagent_server.requests) == 3
    status = await _status(tool.circuit_key)
    assert status.state is CircuitState.OPEN and status.opened_at and "500" in status.last_reason

    for _ in range(5):
        outcome, took = await _call(tool)
        assert (outcome.ok, outcome.text, outcome.error, outcome.code) == (False, CIRCUIT_OPEN_TEXT, CIRCUIT_OPEN_TEXT, None)
        assert took < 0.5
    assert len(subagent_server.requests) == 3  # refused calls never reach the sub-agent
    assert [line for line in state_log if line.startswith("circuit open ")] == [state_log[0]]  # logged once
    assert len(state_log) == 1


async def test_a_refusal_is_fast_where_the_source_costs_its_whole_timeout(sub_agent_factory, subagent_server,
                                                                         breaker_settings):
    subagent_server.default_mode = "timeout"  # answers nothing for 30 s
    row = await sync_to_async(sub_agent_factory)(timeout_sec=1)
    tool = SubAgentTool(sub_agent=row)
    timings = [(await _call(tool))[1] for _ in range(3)]
    assert all(t >= 1 for t in timings)
    outcome, took = await _call(tool)
    assert outcome.error == CIRCUIT_OPEN_TEXT and took < 0.2  # well under the 1 s timeout


async def test_the_tool_is_still_offered_but_says_it_is_unavailable(down_agent, agent_factory):
    agent = await sync_to_async(agent_factory)(sub_agents=[down_agent])
    [offered] = await tools_for_agent(agent, audience=EVERYONE)
    assert not offered.description.startswith(CIRCUIT_OPEN_DESCRIPTION)
    for _ in range(3):
        await _call(SubAgentTool(sub_agent=down_agent))
    [offered] = await tools_for_agent(agent, audience=EVERYONE)
    assert offered.name == "call_canteen"
    assert offered.description == CIRCUIT_OPEN_DESCRIPTION + down_agent.description


async def test_after_the_cooldown_one_probe_closes_it(down_agent, subagent_server, breaker_settings, state_log):
    tool = SubAgentTool(sub_agent=down_agent)
    for _ in range(3):
        await _call(tool)
    assert (await _status(tool.circuit_key)).state is CircuitState.OPEN
    breaker_settings.CIRCUIT_COOLDOWN_SEC = 0  # the cool-down is over
    assert (await _status(tool.circuit_key)).state is CircuitState.HALF_OPEN
    subagent_server.default_mode = "normal"  # the sub-agent is back
    outcome, _ = await _call(tool)
    assert outcome.ok and "已收到" in outcome.text
    assert (await _status(tool.circuit_key)).state is CircuitState.CLOSED
    assert [line.split(" source=")[0] for line in state_log] == ["circuit open", "circuit half-open", "circuit closed"]


async def test_a_failed_probe_opens_it_again(down_agent, subagent_server, breaker_settings, state_log):
    tool = SubAgentTool(sub_agent=down_agent)
    for _ in range(3):
        await _call(tool)
    first = await _status(tool.circuit_key)
    breaker_settings.CIRCUIT_COOLDOWN_SEC = 0
    outcome, _ = await _call(tool)  # the probe: still HTTP 500
    assert not outcome.ok and outcome.error != CIRCUIT_OPEN_TEXT
    breaker_settings.CIRCUIT_COOLDOWN_SEC = 30
    again = await _status(tool.circuit_key)
    assert again.state is CircuitState.OPEN and again.opened_at > first.opened_at
    assert (await _call(tool))[0].error == CIRCUIT_OPEN_TEXT
    assert state_log[-1].startswith("circuit open again")


def test_half_open_lets_exactly_one_probe_through(breaker_settings):
    key = "subagent:test-half-open"
    for _ in range(3):
        circuit_failure(circuit_enter(source=key, name="t", lease_sec=10), reason="boom")
    assert circuit_enter(source=key, name="t", lease_sec=10) is None
    breaker_settings.CIRCUIT_COOLDOWN_SEC = 0
    probe = circuit_enter(source=key, name="t", lease_sec=10)
    assert probe is not None and probe.probe
    assert [circuit_enter(source=key, name="t", lease_sec=10) for _ in range(3)] == [None, None, None]


@pytest.mark.parametrize("mode", ["expired", "http404", "error"])
async def test_an_answer_that_is_not_an_outage_does_not_count(mode, sub_agent_factory, subagent_server,
                                                              breaker_settings):
    subagent_server.default_mode = mode  # 40102, a 4xx other than 429, an `error` event: the source is up
    tool = SubAgentTool(sub_agent=await sync_to_async(sub_agent_factory)())
    for _ in range(5):
        outcome, _ = await _call(tool)
        assert not outcome.ok and outcome.error != CIRCUIT_OPEN_TEXT
    assert (await _status(tool.circuit_key)).state is CircuitState.CLOSED
    assert len(subagent_server.requests) == 5


@pytest.mark.parametrize("mode", ["http429", "http503", "drop"])
async def test_overload_5xx_and_a_cut_connection_count(mode, sub_agent_factory, subagent_server, breaker_settings):
    subagent_server.default_mode = mode
    tool = SubAgentTool(sub_agent=await sync_to_async(sub_agent_factory)())
    for _ in range(3):
        await _call(tool)
    assert (await _status(tool.circuit_key)).state is CircuitState.OPEN


async def test_a_success_starts_the_count_again(sub_agent_factory, subagent_server, breaker_settings):
    tool = SubAgentTool(sub_agent=await sync_to_async(sub_agent_factory)())
    for message in ["[[mode:http500]]", "[[mode:http500]]", "好", "[[mode:http500]]", "[[mode:http500]]"]:
        await _call(tool, message)
    status = await _status(tool.circuit_key)
    assert status.state is CircuitState.CLOSED and status.failures == 2


async def test_a_cancelled_probe_lets_the_next_call_probe(sub_agent_factory, subagent_server, breaker_settings):
    subagent_server.default_mode = "http500"
    tool = SubAgentTool(sub_agent=await sync_to_async(sub_agent_factory)())
    for _ in range(3):
        await _call(tool)
    breaker_settings.CIRCUIT_COOLDOWN_SEC = 0
    subagent_server.default_mode = "trickle"  # the probe streams forever …
    chunks = asyncio.Queue()

    async def emit(text):
        await chunks.put(text)

    probe = asyncio.create_task(tool.run({"message": "探一下"}, CTX, emit))
    await chunks.get()  # … so it is running now
    assert (await _call(tool))[0].error == CIRCUIT_OPEN_TEXT  # only one probe at a time
    probe.cancel()  # the student pressed stop
    with pytest.raises(asyncio.CancelledError):
        await probe
    subagent_server.default_mode = "normal"
    outcome, _ = await _call(tool)  # not refused: the next call is the probe, and closes it
    assert outcome.ok and (await _status(tool.circuit_key)).state is CircuitState.CLOSED


# --- MCP services -------------------------------------------------------------------------------

@pytest.fixture
def http_service(mcp_service_http, mcp_pool_cleanup, breaker_settings):
    mcp_service_http.timeout_sec = 1
    mcp_service_http.display_name = "测试工具箱"
    mcp_service_http.save()
    return mcp_service_http


async def _mcp_tool(service, name):
    infos = {i.name: i for i in await mcp_service_tool_infos(service=service)}
    return McpTool(service=service, info=infos[name])


async def test_mcp_service_opens_refuses_with_its_display_name_and_a_probe_closes_it(http_service, breaker_settings):
    slow = await _mcp_tool(http_service, "slow")
    for _ in range(3):  # each call times out after the service's 1 s
        outcome = await slow.run({"seconds": 5}, CTX, _noop)
        assert not outcome.ok and "超时" in outcome.text
    key = mcp_circuit_key(http_service)
    assert (await _status(key)).state is CircuitState.OPEN

    add = await _mcp_tool(http_service, "add")  # another tool of the same service: refused too
    started = time.perf_counter()
    outcome = await add.run({"a": 1, "b": 2}, CTX, _noop)
    assert time.perf_counter() - started < 0.2
    expected = MCP_OPEN_TEXT.format(service="测试工具箱")
    assert (outcome.ok, outcome.text, outcome.error) == (False, expected, expected)
    assert expected == "MCP 服务“测试工具箱”暂时不可用，请稍后再试。"

    breaker_settings.CIRCUIT_COOLDOWN_SEC = 0
    outcome = await add.run({"a": 1, "b": 2}, CTX, _noop)
    assert outcome.ok and outcome.text == "3"
    assert (await _status(key)).state is CircuitState.CLOSED


async def test_mcp_tool_error_answers_do_not_count(http_service):
    fail = await _mcp_tool(http_service, "fail")
    for _ in range(4):  # isError: the server answered
        assert not (await fail.run({}, CTX, _noop)).ok
    assert (await _status(mcp_circuit_key(http_service))).state is CircuitState.CLOSED


async def test_a2a_sub_agent_goes_through_its_breaker(a2a_sub_agent_factory, a2a_server, breaker_settings):
    """An A2A agent answering HTTP 500 counts as down like a seed sub-agent; a failed task (it
    answered) does not."""
    dying = SubAgentTool(sub_agent=await sync_to_async(a2a_sub_agent_factory)("http500"))
    for _ in range(3):
        outcome, _ = await _call(dying)
        assert not outcome.ok and outcome.error != CIRCUIT_OPEN_TEXT
    assert (await _status(dying.circuit_key)).state is CircuitState.OPEN
    calls = len(a2a_server.rpc_requests("http500"))
    assert calls == 3
    outcome, took = await _call(dying)
    assert (outcome.text, len(a2a_server.rpc_requests("http500"))) == (CIRCUIT_OPEN_TEXT, calls)  # not called
    assert took < 0.5

    failing = SubAgentTool(sub_agent=await sync_to_async(a2a_sub_agent_factory)("stream", name="lib-failed"))
    for _ in range(4):
        outcome, _ = await _call(failing, "[[mode:failed]] 查馆藏")
        assert not outcome.ok and outcome.error != CIRCUIT_OPEN_TEXT
    assert (await _status(failing.circuit_key)).state is CircuitState.CLOSED
