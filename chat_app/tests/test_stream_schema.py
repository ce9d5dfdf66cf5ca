"""The stream's OpenAPI description (chat_app/views/stream_schema.py) and the frames the server
sends agree: every event type is described, every frame validates, nothing sent is undocumented."""
from typing import get_args

import jsonschema
import pytest

from agents_app.runtime.events import ApprovalRequired, Chunk, Done, Error, Event, ToolCall, ToolChunk, ToolResult
from campus_agent.errors import CAMPUS_TOKEN_EXPIRED
from chat_app.models import Run
from chat_app.services.runs import run_stored_end
from chat_app.tests.sse import chat
from chat_app.views.stream_schema import FRAME_SCHEMA, SESSION_FRAME_SCHEMA

# Every optional field of every event, set at least once.
SAMPLES = [
    Chunk("今天"),
    Chunk("（关键词路由）", fallback=True),
    ToolCall(call_id="call_1", tool="call_canteen", args='{"message": "吃啥"}'),
    ToolChunk(call_id="call_1", tool="call_canteen", content="一食堂"),
    ToolResult(call_id="call_1", tool="call_canteen", ok=True, content="一食堂有红烧肉"),
    ToolResult(call_id="call_1", tool="call_canteen", ok=False, content="调用子 Agent 失败: reset", error="暂时无法连接"),
    ToolResult(call_id="call_2", tool="docs__handbook", ok=True, content="手册", label="学生手册",
               links=[{"uri": "https://jwc.example.edu.cn/handbook.pdf", "name": "学生手册"}],
               images=[{"src": "data:image/png;base64,iVBORw0KGgo="}]),
    ApprovalRequired(call_id="call_3", tool="call_course_select", args='{"message": "选 CS101"}',
                     expires_at="2026-12-01T08:10:00+00:00"),
    Error(CAMPUS_TOKEN_EXPIRED, "登录已过期"),
    Done(full_text="今天一食堂有红烧肉", usage={"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}, chart={"type": "bar", "labels": ["a"], "datasets": [{"data": [1]}]}),
    Done(full_text="", interrupted=True, fallback=True),
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
    llm_settings.reply_text("一食堂有红烧肉。")
    result = chat(live_asgi, {"message": "今天吃啥"}, headers=auth_headers)

    assert (result.types[0], result.types[-1]) == ("session", "done")
    assert set(result.types) == {"session", "tool_call", "tool_chunk", "tool_result", "chunk", "done"}
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
