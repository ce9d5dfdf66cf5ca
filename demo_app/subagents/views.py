"""The demo sub-agents' HTTP face: `POST /demo/subagents/<name>/api/v1/chat` (docs/design.md#sub-agents).

They take no campus token: the demo data is public, and students who log in with a password
have none to send.
"""
import asyncio
import json
import uuid

from django.http import JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt
from loguru import logger

from campus_agent.base.errors import INVALID_BODY
from campus_agent.base.json_body import JsonBodyRefused, json_object_read
from campus_agent.base.redaction import clip_text
from campus_agent.base.request_id import request_id_get, request_id_set
from campus_agent.base.sse import sse_frame
from demo_app.subagents.answer import DemoAnswer
from demo_app.subagents.catalog import DEMO_SUBAGENTS

# A short pause between chunks, so the page shows the answer streaming in as a real one would.
CHUNK_DELAY_SEC = 0.02
MESSAGE_MAX_CHARS = 8000
BODY_INVALID = "请求体须是 JSON：{\"message\": \"…\", \"domain\": \"…\"}，message 为 1–8000 字。"
AGENT_UNKNOWN = "没有这个演示子 Agent。"
METHOD_NOT_ALLOWED = "只接受 POST 请求。"
# The gateway's codes for these answers (campus_agent.base.errors, which this app may not import).
NOT_FOUND_CODE = 40401
METHOD_NOT_ALLOWED_CODE = 40501


def _error(message: str, *, code: int, status: int) -> JsonResponse:
    return JsonResponse({"code": code, "message": message}, status=status, json_dumps_params={"ensure_ascii": False})


def _message_of(body: dict) -> str | None:
    message = body.get("message")
    if not isinstance(message, str) or not message.strip() or len(message) > MESSAGE_MAX_CHARS:
        return None
    return message.strip()


async def _answer_frames(name: str, answer: DemoAnswer, request_id: str):
    request_id_set(request_id)  # the middleware's ContextVar is gone once the body streams
    yield sse_frame({"type": "session", "session_id": uuid.uuid4().hex, "agent": name})
    args = json.dumps(answer.lookup_args, ensure_ascii=False)
    yield sse_frame({"type": "tool_call", "tool": answer.lookup, "args": args})
    yield sse_frame({"type": "tool_result", "tool": answer.lookup, "ok": True})
    for part in answer.parts:
        await asyncio.sleep(CHUNK_DELAY_SEC)
        yield sse_frame({"type": "chunk", "content": part})
    yield sse_frame({"type": "done", "full_text": answer.full_text, "chart": answer.chart})
    logger.info("demo sub-agent {} answered: chars={} chart={}", name, len(answer.full_text), bool(answer.chart))


@csrf_exempt  # a server-to-server API called with a bearer token, never from a browser form
async def demo_subagent_chat(request, name: str):
    if request.method != "POST":
        response = _error(METHOD_NOT_ALLOWED, code=METHOD_NOT_ALLOWED_CODE, status=405)
        response["Allow"] = "POST"
        return response
    agent = DEMO_SUBAGENTS.get(name)
    if agent is None:
        return _error(AGENT_UNKNOWN, code=NOT_FOUND_CODE, status=404)
    try:
        body = json_object_read(request)  # the gateway's own body checks (campus_agent.base.json_body)
    except JsonBodyRefused as exc:
        return _error(exc.message, code=exc.code, status=exc.status)
    message = _message_of(body)
    if message is None:
        return _error(BODY_INVALID, code=INVALID_BODY, status=400)
    logger.info("demo sub-agent {} asked: {}", name, clip_text(message))
    answer = agent.answer(message=message)
    response = StreamingHttpResponse(
        _answer_frames(name, answer, request_id_get()), content_type="text/event-stream; charset=utf-8"
    )
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


async def demo_subagent_health(request, name: str):
    """`GET <base_url>/healthz`, what the admin's health check asks (docs/api.md)."""
    if name not in DEMO_SUBAGENTS:
        return _error(AGENT_UNKNOWN, code=NOT_FOUND_CODE, status=404)
    return JsonResponse({"status": "ok"})
