"""OpenAPI description of `POST /api/v1/chat`.

drf-spectacular only documents DRF views, and the stream must stay a plain async Django view.
So this DRF view is routed at the same path *after* the real one: Django always resolves the
real view first, and the schema generator, which walks every pattern, documents this one.

The frames are described from the runtime's event types (agents_app.runtime.events: each has its
`FRAME_SCHEMA`), plus the `session` frame the run sends first; chat_app/tests/test_stream_schema.py
holds the frames the server sends to this description.
"""
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework.response import Response

from agents_app.runtime.events import EVENT_TYPES, frame_schema
from chat_app.serializers import ErrorSerializer
from chat_app.views.base import ApiView

_STR = {"type": "string"}
SESSION_FRAME_SCHEMA = frame_schema(
    "session",
    "第一帧（没有 id 行）；message_id 是最终回答消息的 ID；run_id 用于重新接上（GET /api/v1/runs/<run_id>/events）或停止这次运行",
    required={"conversation_id": _STR, "message_id": _STR, "request_id": _STR, "run_id": _STR},
)
FRAME_SCHEMA = {
    "description": (
        "每个事件是一帧 `data: <json>\\n\\n`（JSON 不转义中文）；`session` 之后的每一帧前有一行 `id: <序号>`"
        "（运行内的序号 1、2、3……，断线后用 Last-Event-ID 或 ?after= 从这里接上）；空闲时发送注释帧 `: ping\\n\\n`（没有 id 行）。"
        "`session` 一定是第一帧，`done` 一定是最后一帧；`error` 之后仍有 `done`。"
    ),
    "oneOf": [SESSION_FRAME_SCHEMA, *(event.FRAME_SCHEMA for event in EVENT_TYPES)],
}

CHAT_REQUEST_SCHEMA = {
    "type": "object",
    "required": ["message"],
    "properties": {
        "message": {"type": "string", "minLength": 1, "maxLength": 8000, "description": "去掉首尾空白后 1–8000 字"},
        "conversation_id": {"type": "string", "format": "uuid", "nullable": True, "description": "null 表示新对话"},
        "agent": {"type": "string", "nullable": True, "description": "智能体标识；null 用默认智能体"},
        "hint_domain": {"type": "string", "nullable": True, "maxLength": 64},
    },
}

SSE_EXAMPLE = (
    'data: {"type":"session","conversation_id":"8c0f…","message_id":"5e2a…","request_id":"3f2a9c1d4b5e6f70",'
    '"run_id":"b71d…"}\n\n'
    'id: 1\ndata: {"type":"chunk","content":"今天"}\n\n'
    ": ping\n\n"
    'id: 2\ndata: {"type":"done","full_text":"今天一食堂有…","message_id":"5e2a…","chart":null}\n\n'
)


class ChatStreamSchemaView(ApiView):
    """Never served (see the module docstring)."""

    @extend_schema(
        tags=["chat"],
        operation_id="chat_stream",
        summary="发送消息并以 SSE 流式接收回答",
        description=(
            "认证：`Authorization: Bearer <JWT>`，或页面的 Django 会话 + `X-CSRFToken`。"
            "响应头：`Cache-Control: no-cache`、`X-Accel-Buffering: no`、`X-Request-Id`。"
            "用户消息在调用模型之前保存；回答（客户端断开或失败时为部分回答并标记 interrupted）在本轮结束时保存。"
        ),
        request={"application/json": CHAT_REQUEST_SCHEMA},
        responses={
            (200, "text/event-stream"): OpenApiResponse(
                response=FRAME_SCHEMA,
                description="SSE 帧序列",
                examples=[OpenApiExample("一次简单回答", value=SSE_EXAMPLE, media_type="text/event-stream")],
            ),
            400: OpenApiResponse(ErrorSerializer, description="40001 请求体无效（过大、不是 JSON、消息为空或超过 8000 字）"),
            401: OpenApiResponse(ErrorSerializer, description="40101 token_missing / token_invalid"),
            403: OpenApiResponse(ErrorSerializer, description="40301 会话请求缺少 CSRF 令牌"),
            404: OpenApiResponse(ErrorSerializer, description="40401 对话不存在或不属于调用者"),
            429: OpenApiResponse(ErrorSerializer, description="42901 同时进行的流过多；42902 发送过于频繁"),
        },
    )
    def post(self, request):  # pragma: no cover - routed behind the real view
        return Response(status=405)
