"""OpenAPI description of `POST /api/v1/chat` and of `/api/v1/runs/<run_id>/…`.

drf-spectacular only documents DRF views, and the stream must stay a plain async Django view.
So this DRF view is routed at the same path *after* the real one: Django always resolves the
real view first, and the schema generator, which walks every pattern, documents this one.

The frames are described from the runtime's event types (agents_app.runtime.events: each has its
`FRAME_SCHEMA`), plus the `session` frame the run sends first; chat_app/tests/test_stream_schema.py
holds the frames the server sends to this description.
"""
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from agents_app.runtime.events import EVENT_TYPES, frame_schema
from chat_app.serializers import ErrorSerializer
from chat_app.views.base import ApiView

_STR = {"type": "string"}


class RunStatusSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=["stopping", "finished"])


class ApprovalDecisionSerializer(serializers.Serializer):
    call_id = serializers.CharField(max_length=128, help_text="approval_required 帧的 call_id")
    decision = serializers.ChoiceField(choices=["approve", "reject"])


class ApprovalAnswerSerializer(serializers.Serializer):
    call_id = serializers.CharField()
    status = serializers.ChoiceField(choices=["approved", "rejected"])
    resumed = serializers.BooleanField(help_text="这是本轮最后一个决定，运行已继续")
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


# --- /api/v1/runs/<run_id>/… (chat_app/views/runs.py), documented the same way -----------------

_RUN_ID = OpenApiParameter("run_id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="session 帧里的 run_id")
_RUN_AUTH = "认证同 POST /api/v1/chat。别人的运行返回 404。"


class RunEventsSchemaView(ApiView):
    """Never served (see the module docstring)."""

    @extend_schema(
        tags=["chat"],
        operation_id="run_events",
        summary="重新接上一次运行的 SSE 流",
        description=_RUN_AUTH + "先重放 Last-Event-ID（请求头）或 ?after=N 之后的帧，再实时跟随到 done；"
        "已结束的运行重放仍保留的帧，日志过期后给出由保存的回答构造的 session 与 done。",
        parameters=[
            _RUN_ID,
            OpenApiParameter("after", OpenApiTypes.INT, OpenApiParameter.QUERY, required=False,
                             description="已收到的最后一帧序号（没有 Last-Event-ID 时用）"),
            OpenApiParameter("Last-Event-ID", OpenApiTypes.STR, OpenApiParameter.HEADER, required=False),
        ],
        responses={
            (200, "text/event-stream"): OpenApiResponse(response=FRAME_SCHEMA, description="SSE 帧序列"),
            400: OpenApiResponse(ErrorSerializer, description="40001 Last-Event-ID / after 不是非负整数"),
            401: OpenApiResponse(ErrorSerializer, description="40101"),
            404: OpenApiResponse(ErrorSerializer, description="40401 运行不存在"),
        },
    )
    def get(self, request, run_id):  # pragma: no cover - routed behind the real view
        return Response(status=405)


class RunStopSchemaView(ApiView):
    """Never served (see the module docstring)."""

    @extend_schema(
        tags=["chat"],
        operation_id="run_stop",
        summary="停止一次运行",
        description=_RUN_AUTH + "运行及其正在执行的工具在 1 秒内取消（等待批准的运行直接结束，待批准的调用记为未执行），"
        "已生成的部分回答保存并标记 interrupted。",
        parameters=[_RUN_ID],
        request=None,
        responses={
            202: OpenApiResponse(RunStatusSerializer, description='{"status": "stopping"}'),
            200: OpenApiResponse(RunStatusSerializer, description='{"status": "finished"}：运行已经结束'),
            401: OpenApiResponse(ErrorSerializer, description="40101"),
            404: OpenApiResponse(ErrorSerializer, description="40401 运行不存在"),
        },
    )
    def post(self, request, run_id):  # pragma: no cover - routed behind the real view
        return Response(status=405)


class RunApprovalsSchemaView(ApiView):
    """Never served (see the module docstring)."""

    @extend_schema(
        tags=["chat"],
        operation_id="run_approval_decide",
        summary="批准或拒绝一个等待批准的工具调用",
        description=_RUN_AUTH + "approval_required 帧里的 call_id。同一轮的多个调用逐个决定；最后一个决定后运行在处理该请求的"
        "进程上继续（resumed: true），帧照常出现在原来的流里。拒绝或超时（APPROVAL_TIMEOUT_SEC）作为工具结果告诉模型。",
        parameters=[_RUN_ID],
        request=ApprovalDecisionSerializer,
        responses={
            200: ApprovalAnswerSerializer,
            400: OpenApiResponse(ErrorSerializer, description="40001 call_id 或 decision 无效"),
            401: OpenApiResponse(ErrorSerializer, description="40101"),
            404: OpenApiResponse(ErrorSerializer, description="40401 运行不存在，或它没有这个等待批准的调用"),
            409: OpenApiResponse(ErrorSerializer, description="40903 运行没有在等待批准，或这个调用已有结果"),
            413: OpenApiResponse(ErrorSerializer, description="41301 请求体过大"),
            415: OpenApiResponse(ErrorSerializer, description="41501 请求体不是 JSON"),
        },
    )
    def post(self, request, run_id):  # pragma: no cover - routed behind the real view
        return Response(status=405)
