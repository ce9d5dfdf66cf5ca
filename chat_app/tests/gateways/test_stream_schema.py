"""The stream's OpenAPI description (chat_app/gateways/api/schema.py) and the frames the server
sends agree: every event type is described, every frame validates, nothing sent is undocumented."""
from typing import get_args

import jsonschema
import pytest
from asgiref.sync import iscoroutinefunction
from django.urls import resolve
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.validation import validate_schema

from agents_app.runtime.events import (
    ApprovalRequired,
    AuthorizationRequired,
    Chunk,
    Done,
    ElicitationRequired,
    Error,
    Event,
    Moderation,
    Reasoning,
    ToolCall,
    ToolChunk,
    ToolResult,
)
from campus_agent.base.errors import CAMPUS_TOKEN_EXPIRED
from chat_app.gateways.api.schema import FRAME_SCHEMA, SESSION_FRAME_SCHEMA
from chat_app.models import Run
from chat_app.runs.state import run_stored_end
from testkit.model.fake_llm import Reply
from testkit.web.sse import chat

# Every optional field of every event, set at least once.
SAMPLES = [
    Chunk("今天"),
    Chunk("（关键词路由）", fallback=True),
    Reasoning("先看看食堂菜单"),
    ToolCall(call_id="call_1", tool="call_canteen", args='{"message": "吃啥"}'),
    ToolChunk(call_id="call_1", tool="call_canteen", content="一食堂"),
    ToolResult(call_id="call_1", tool="call_canteen", ok=True, content="一食堂有红烧肉"),
    ToolResult(call_id="call_1", tool="call_canteen", ok=False, content="调用子 Agent 失败: reset", error="暂时无法连接"),
    ToolResult(call_id="call_3", tool="call_canteen", ok=False, content="工具调用被中断", error="工具调用被中断",
               interrupted=True),
    ToolResult(call_id="call_2", tool="docs__handbook", ok=True, content="手册", label="学生手册",
               links=[{"uri": "https://jwc.example.edu.cn/handbook.pdf", "name": "学生手册"}],
               images=[{"src": "data:image/png;base64,iVBORw0KGgo="}]),
    ToolResult(call_id="call_5", tool="search_handbook", ok=True, content="[1] 《转专业管理规定》 p.2 …",
               sources=[{"n": 1, "document_id": 7, "title": "转专业管理规定", "page": 2, "heading": "第二章 › 第四条",
                         "url": "/api/v1/knowledge/documents/7/file#page=2"}]),
    ApprovalRequired(call_id="call_3", tool="call_course_select", args='{"message": "选 CS101"}',
                     expires_at="2026-12-01T08:10:00+00:00"),
    AuthorizationRequired(call_id="call_4", tool="library__whoami", args="{}", service="图书馆",
                          url="https://sso.example.edu.cn/authorize?client_id=a&state=s",
                          expires_at="2026-12-01T08:10:00+00:00"),
    ElicitationRequired(call_id="call_5", tool="courses__enrol", args="{}", service="选课", message="请填写选课信息",
                        mode="form", expires_at="2026-12-01T08:10:00+00:00",
                        schema={"type": "object", "properties": {"credits": {"type": "integer", "default": 3}}},
                        defaults={"credits": 3}),
    ElicitationRequired(call_id="call_6", tool="fees__pay", args="{}", service="缴费", message="请完成支付", mode="url",
                        expires_at="2026-12-01T08:10:00+00:00", url="https://pay.example.edu.cn/order/42"),
    Moderation(stage="question", action="block", category="涉政"),
    Error(CAMPUS_TOKEN_EXPIRED, "登录已过期"),
    Done(full_text="今天一食堂有红烧肉", usage={"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}, chart={"type": "bar", "labels": ["a"], "datasets": [{"data": [1]}]},
         provider="百炼", model="qwen-plus"),
    Done(full_text="", interrupted=True, fallback=True),
    Done(full_text="见第四条 [1]。", sources=[{"call_id": "call_5", "n": 1, "document_id": 7, "title": "转专业管理规定",
                                                "page": 2, "heading": "第二章 › 第四条",
                                                "url": "/api/v1/knowledge/documents/7/file#page=2"}]),
    Done(full_text="写到一半", interrupted=True, interrupted_reason="length"),
]


def _json_schema(openapi: dict, *, strict: bool) -> dict:
    """OpenAPI 3.0 → JSON Schema (`nullable` → a "null" type); `strict`: no property beyond the
    documented ones."""
    if not isinstance(openapi, dict):
        return openapi
    schema = {key: _json_schema(value, strict=strict) if key != "properties" else
              {name: _json_schema(sub, strict=strict) for name, sub in value.items()}
              for key, value in openapi.items() if key != "nullable"}
    if openapi.get("nullable"):
        schema["type"] = [schema["type"], "null"]
    if strict and schema.get("type") == "object" and "properties" in schema:
        schema["additionalProperties"] = False
    return schema


def _frame_validator() -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator({"oneOf": [_json_schema(f, strict=True) for f in FRAME_SCHEMA["oneOf"]]})


def _payload(event) -> dict:
    return event.frame(message_id="5e2a0000-0000-0000-0000-000000000000") if isinstance(event, Done) else event.frame()


def test_every_event_type_and_the_session_frame_are_described():
    titles = [frame["title"] for frame in FRAME_SCHEMA["oneOf"]]
    assert titles == ["session", *(event_type.FRAME_SCHEMA["title"] for event_type in get_args(Event))]
    assert {type(sample) for sample in SAMPLES} == set(get_args(Event))


@pytest.mark.parametrize("event", SAMPLES, ids=lambda e: type(e).__name__)
def test_each_event_frame_validates_against_its_own_schema(event):
    jsonschema.validate(_payload(event), _json_schema(type(event).FRAME_SCHEMA, strict=True))


def test_every_documented_field_is_sent_by_some_frame():
    for event_type in get_args(Event):
        sent = set().union(*(_payload(s) for s in SAMPLES if type(s) is event_type))
        assert sent == set(event_type.FRAME_SCHEMA["properties"]), event_type.__name__


@pytest.mark.django_db(transaction=True)
def test_a_real_stream_sends_only_described_frames(live_asgi, llm_settings, agent, subagent_server, auth_headers):
    llm_settings.reply_tool_calls(("call_canteen", {"message": "今天吃啥"}))
    llm_settings.queue(Reply(reasoning="菜单到了。", text="一食堂有红烧肉。"))
    result = chat(live_asgi, {"message": "今天吃啥"}, headers=auth_headers)

    assert (result.types[0], result.types[-1]) == ("session", "done")
    assert set(result.types) == {"session", "tool_call", "tool_chunk", "tool_result", "reasoning", "chunk", "done"}
    validator = _frame_validator()
    for frame in result.frames:
        errors = list(validator.iter_errors(frame))
        assert not errors, (frame, errors[0].message)
    jsonschema.validate(result.frames[0], _json_schema(SESSION_FRAME_SCHEMA, strict=True))
    # the session frame has no id line; every later frame has the run's sequence number
    assert result.ids == [None, *range(1, len(result.frames))]
    # the `done` a client gets once the run's log has expired is described too
    run = Run.objects.get(id=result.frames[0]["run_id"])
    jsonschema.validate(run_stored_end(run=run), _json_schema(Done.FRAME_SCHEMA, strict=True))


# --- the document (chat_app.gateways.api.schema's hook adds the async views to it) ------------------------

ASYNC_OPERATIONS = {  # path → (method, operationId, URL name of the async view it describes)
    "/api/v1/chat": ("post", "chat_stream", "chat-stream"),
    "/api/v1/runs/{run_id}/events": ("get", "run_events", "run-events"),
    "/api/v1/runs/{run_id}/stop": ("post", "run_stop", "run-stop"),
    "/api/v1/runs/{run_id}/approvals": ("post", "run_approval_decide", "run-approvals"),
}

ASYNC_ANSWERS = {
    "/api/v1/chat": {"200", "400", "401", "403", "404", "413", "415", "429", "503"},
    "/api/v1/runs/{run_id}/events": {"200", "400", "401", "404"},
    "/api/v1/runs/{run_id}/stop": {"200", "202", "401", "403", "404", "409"},
    "/api/v1/runs/{run_id}/approvals": {"200", "400", "401", "403", "404", "409", "413", "415", "429"},
}


def _document() -> dict:
    return SchemaGenerator().get_schema(request=None, public=True)


def _refs(node):
    if isinstance(node, dict):
        if isinstance(node.get("$ref"), str):
            yield node["$ref"]
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def test_the_document_describes_the_four_async_views_and_every_frame():
    document = _document()
    validate_schema(document)  # OpenAPI 3.0, as `manage.py spectacular --validate`
    frame_titles = ["session", *(event_type.FRAME_SCHEMA["title"] for event_type in get_args(Event))]
    for path, (method, operation_id, _) in ASYNC_OPERATIONS.items():
        assert list(document["paths"][path]) == [method], path
        operation = document["paths"][path][method]
        assert operation["operationId"] == operation_id
        assert operation["security"] == [{"jwtAuth": []}, {"cookieAuth": []}]
        if method == "get" or path == "/api/v1/chat":
            stream = operation["responses"]["200"]["content"]["text/event-stream"]["schema"]
            assert [frame["title"] for frame in stream["oneOf"]] == frame_titles, path
    # what the views answer (chat_app/tests/gateways/test_chat_validation.py, test_runs.py, test_approvals.py …)
    for path, statuses in ASYNC_ANSWERS.items():
        method = ASYNC_OPERATIONS[path][0]
        assert set(document["paths"][path][method]["responses"]) == statuses, path
    assert "Retry-After" in document["paths"]["/api/v1/chat"]["post"]["responses"]["429"]["headers"]
    for scheme in ("jwtAuth", "cookieAuth"):
        assert scheme in document["components"]["securitySchemes"]
    components = document["components"]["schemas"]
    assert {"Error", "RunStatus", "ApprovalDecision", "ApprovalAnswer", "DecisionEnum"} <= set(components)
    for ref in set(_refs(document)):
        assert ref.removeprefix("#/components/schemas/") in components, ref


def test_each_described_path_is_routed_to_the_async_view_it_describes():
    for path, (_, _, url_name) in ASYNC_OPERATIONS.items():
        match = resolve(path.replace("{run_id}", "b71d0000-0000-0000-0000-000000000000"))
        assert match.url_name == url_name, path
        # a DRF view would be documented by drf-spectacular itself (and then twice)
        assert iscoroutinefunction(match.func) and not hasattr(match.func, "cls"), path


def test_the_document_is_the_same_each_time_it_is_built():
    # the enum hook rewrites the component schemas it is given: the hook must hand it copies
    assert _document() == _document()
