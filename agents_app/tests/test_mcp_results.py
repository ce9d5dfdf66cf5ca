"""MCP results beyond text, through the real loop against the MCP test server (streamable-http):
structured content checked against the tool's outputSchema and given to the model as JSON,
resource links and a trusted service's images in the tool_result frame, a tool's title as its
display name."""
import json

import pytest
from asgiref.sync import sync_to_async

from agents_app.mcp.results import OUTPUT_INVALID_TEXT
from agents_app.mcp.tools import OUTPUT_INVALID_NOTICE
from agents_app.runtime.context import RunContext
from agents_app.runtime.events import ToolResult
from agents_app.runtime.loop import run_turn
from testkit.mcp.servers import (
    BROKEN_FORECAST,
    FORECAST,
    HANDBOOK_NAME,
    HANDBOOK_URL,
    PIXEL_PNG_B64,
    TIMETABLE_TITLE,
)

pytestmark = pytest.mark.django_db(transaction=True)

CTX = RunContext(request_id="5e5e0123456789ab", conversation_id="conv-mcp", campus_token=None)


@pytest.fixture(autouse=True)
def _pool(mcp_pool_cleanup):
    return mcp_pool_cleanup


@pytest.fixture
def make_agent(agent_factory):
    return sync_to_async(lambda *services: agent_factory(mcp_services=list(services)))


async def turn(agent, llm, call):
    llm.reply_tool_calls(call)
    llm.reply_text("好的")
    events = [e async for e in run_turn(agent=agent, history=[{"role": "user", "content": "查一下"}], ctx=CTX)]
    [result] = [e for e in events if isinstance(e, ToolResult)]
    return result


async def test_structured_content_that_fits_reaches_the_model_as_json(mcp_service_http, make_agent, llm_settings):
    result = await turn(await make_agent(mcp_service_http), llm_settings, ("http-tools__forecast", {}))
    assert result.ok and json.loads(result.content) == FORECAST
    assert json.loads(llm_settings.requests[1].messages[-1]["content"]) == FORECAST


async def test_structured_content_that_breaks_the_output_schema_is_an_error(mcp_service_http, make_agent, llm_settings):
    agent = await make_agent(mcp_service_http)
    result = await turn(agent, llm_settings, ("http-tools__forecast_broken", {}))
    # The student reads a sentence; the schema's complaint is for the model (issue 20).
    assert not result.ok and result.error == OUTPUT_INVALID_NOTICE.format(tool="http-tools__forecast_broken")
    assert result.content.startswith(OUTPUT_INVALID_TEXT.format(tool="http-tools__forecast_broken", reason=""))
    assert "'low' is a required property" in result.content  # the schema's complaint, for the model
    assert json.dumps(BROKEN_FORECAST, ensure_ascii=False) not in llm_settings.requests[1].messages[-1]["content"]
    # The server answered: the session is kept and the next call works on it.
    assert (await turn(agent, llm_settings, ("http-tools__forecast", {}))).ok


async def test_resource_links_reach_the_frame_http_only(mcp_service_http, make_agent, llm_settings):
    result = await turn(await make_agent(mcp_service_http), llm_settings, ("http-tools__handbook", {}))
    assert result.ok
    assert result.links == [{"uri": HANDBOOK_URL, "name": HANDBOOK_NAME}]  # the javascript: one is dropped
    assert result.frame()["links"] == [{"uri": HANDBOOK_URL, "name": HANDBOOK_NAME}]
    assert f"[资源链接 handbook.pdf: {HANDBOOK_URL}]" in result.content  # the model is told of both
    assert "javascript:alert(1)" in result.content


async def test_images_reach_the_frame_only_from_a_trusted_service(mcp_service_http, make_agent, llm_settings):
    agent = await make_agent(mcp_service_http)
    untrusted = await turn(agent, llm_settings, ("http-tools__picture", {}))
    assert untrusted.ok and untrusted.images is None and "images" not in untrusted.frame()
    assert "未转给模型" in untrusted.content

    mcp_service_http.trusted = True
    await mcp_service_http.asave()
    trusted = await turn(agent, llm_settings, ("http-tools__picture", {}))
    assert trusted.frame()["images"] == [{"src": f"data:image/png;base64,{PIXEL_PNG_B64}"}]
    assert "已显示给用户" in trusted.content and PIXEL_PNG_B64 not in trusted.content  # not given to the model


async def test_the_tools_title_is_its_display_name_unless_staff_set_one(mcp_service_http, make_agent, llm_settings):
    agent = await make_agent(mcp_service_http)
    titled = await turn(agent, llm_settings, ("http-tools__timetable", {}))
    assert titled.ok and titled.label == TIMETABLE_TITLE and titled.frame()["label"] == TIMETABLE_TITLE
    plain = await turn(agent, llm_settings, ("http-tools__add", {"a": 1, "b": 1}))
    assert plain.label is None and "label" not in plain.frame()

    mcp_service_http.display_name = "校园工具"
    await mcp_service_http.asave()
    named = await turn(agent, llm_settings, ("http-tools__timetable", {}))
    assert named.label is None  # staff's name wins (the page labels the service's tools with it)


async def test_a_frame_without_extras_is_unchanged(mcp_service_http, make_agent, llm_settings):
    result = await turn(await make_agent(mcp_service_http), llm_settings, ("http-tools__add", {"a": 2, "b": 3}))
    assert result.frame() == {"type": "tool_result", "call_id": result.call_id, "tool": "http-tools__add", "ok": True}
    assert result.content == "5"  # the SDK's wrapped primitive keeps its plain text


def test_a_result_the_sdk_refuses_is_a_bad_answer_not_an_outage():
    """mcp 2.3 parses a result against the negotiated revision and raises pydantic's
    ValidationError for one that breaks it: the server answered, wrongly."""
    from mcp_types import CallToolResult
    from pydantic import ValidationError

    from agents_app.mcp.tools import BAD_ANSWER_REASON, mcp_failure_reason, mcp_source_failed

    with pytest.raises(ValidationError) as refused:
        CallToolResult.model_validate({"content": "not a list"})
    assert mcp_failure_reason(refused.value) == BAD_ANSWER_REASON
    assert mcp_source_failed(refused.value) is False
