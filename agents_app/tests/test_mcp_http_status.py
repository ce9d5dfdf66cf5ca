"""An MCP server answering an HTTP error status (issue 20): mcp 2.3's streamable-http transport
turns every non-2xx answer into one generic MCPError, so the status is read below the SDK
(agents_app/mcp/connect.py, the HTTP client's response hook) and classified: 5xx and 429 count
for the circuit breaker, 401/403/404 are the server answering (they reset it) and read
differently to the model; the student reads a Chinese sentence, never the SDK's text.

Real servers built with the SDK (HttpMcpServer.fail) on loopback; the SDK is not patched."""
import re

import pytest
from asgiref.sync import sync_to_async

from agents_app.mcp.tools import (
    DOWN_NOTICE,
    HTTP_BUSY_REASON,
    HTTP_REFUSED_REASON,
    HTTP_SERVER_ERROR_REASON,
    REFUSED_NOTICE,
    mcp_circuit_key,
    mcp_service_tool_infos,
)
from agents_app.runtime.context import RunContext
from agents_app.runtime.mcp_tool import McpTool
from campus_agent.base.circuit import CircuitState, circuit_status

pytestmark = pytest.mark.django_db(transaction=True)

CTX = RunContext(request_id="5a7u5012345678ab", conversation_id="conv-status", campus_token="campus-token-0005")
OPENING = ("server/discover", "initialize")
# What must never reach a student: the SDK's words, an exception's name, English.
SDK_WORDS = re.compile(r"MCPError|Error|Exception|Server returned|Failed to|validation|Traceback|[A-Za-z]{6,}")


async def _noop(text: str) -> None:
    return None


@pytest.fixture
def breaker(settings):
    settings.CIRCUIT_FAILURES = 3
    settings.CIRCUIT_WINDOW_SEC = 60
    settings.CIRCUIT_COOLDOWN_SEC = 30
    return settings


@pytest.fixture
def service(mcp_service_http, mcp_pool_cleanup, breaker):
    mcp_service_http.timeout_sec = 3
    mcp_service_http.display_name = "测试工具箱"
    mcp_service_http.save()
    return mcp_service_http


async def _add_tool(service) -> McpTool:
    infos = {i.name: i for i in await mcp_service_tool_infos(service=service)}
    return McpTool(service=service, info=infos["add"])


async def _state(service) -> CircuitState:
    return (await sync_to_async(circuit_status)(source=mcp_circuit_key(service))).state


def _model_reason(status: int) -> str:
    if status in (401, 403):
        return HTTP_REFUSED_REASON.format(status=status)
    if status == 429:
        return HTTP_BUSY_REASON
    return HTTP_SERVER_ERROR_REASON.format(status=status)


OUTAGES = [500, 503, 429]
REFUSALS = [401, 403]


@pytest.mark.parametrize("status", OUTAGES + REFUSALS)
async def test_a_status_on_tools_call_is_read_below_the_sdk(status, service, mcp_http_server):
    tool = await _add_tool(service)  # listed while the server still answers
    mcp_http_server.fail(status)
    outcome = await tool.run({"a": 1, "b": 2}, CTX, _noop)
    assert mcp_http_server.failed == 1
    assert not outcome.ok
    assert _model_reason(status) in outcome.text  # the model can tell a 401 from a 500
    notice = (REFUSED_NOTICE if status in REFUSALS else DOWN_NOTICE).format(service="测试工具箱")
    assert outcome.error == notice and not SDK_WORDS.search(outcome.error)


@pytest.mark.parametrize("status", OUTAGES)
async def test_5xx_and_429_on_tools_call_open_the_breaker(status, service, mcp_http_server):
    tool = await _add_tool(service)
    mcp_http_server.fail(status)
    for _ in range(3):
        assert not (await tool.run({"a": 1, "b": 2}, CTX, _noop)).ok
    assert await _state(service) is CircuitState.OPEN


@pytest.mark.parametrize("status", REFUSALS)
async def test_401_and_403_on_tools_call_do_not_count(status, service, mcp_http_server):
    tool = await _add_tool(service)
    mcp_http_server.fail(status)
    for _ in range(4):
        assert not (await tool.run({"a": 1, "b": 2}, CTX, _noop)).ok
    assert await _state(service) is CircuitState.CLOSED
    mcp_http_server.fail(None)
    outcome = await tool.run({"a": 1, "b": 2}, CTX, _noop)  # the session was kept: it works again
    assert outcome.ok and outcome.text == "3"


@pytest.mark.parametrize("status", OUTAGES + REFUSALS)
async def test_a_status_when_the_session_opens(status, service, mcp_http_server):
    """The opening (server/discover, initialize) answered with the status: 401/403 reset the
    breaker (before: they counted), 5xx/429 count; the student reads Chinese either way."""
    from agents_app.mcp.tools import McpToolInfo

    mcp_http_server.fail(status, methods=OPENING)
    tool = McpTool(service=service, info=McpToolInfo(name="add", description="加法", input_schema=None))
    outcomes = [await tool.run({"a": 1, "b": 2}, CTX, _noop) for _ in range(3)]
    assert mcp_http_server.failed >= 1
    assert all(not o.ok for o in outcomes)
    assert _model_reason(status) in outcomes[0].text
    assert not SDK_WORDS.search(outcomes[0].error)
    expected = CircuitState.CLOSED if status in REFUSALS else CircuitState.OPEN
    assert await _state(service) is expected


async def test_a_401_and_a_500_read_differently_to_the_model(service, mcp_http_server):
    tool = await _add_tool(service)
    texts = []
    for status in (401, 500):
        mcp_http_server.fail(status)
        texts.append((await tool.run({"a": 1, "b": 2}, CTX, _noop)).text)
    assert texts[0] != texts[1] and "401" in texts[0] and "500" in texts[1]
