"""chat_app in the OpenAPI document: its auth schemes, and the async views drf-spectacular cannot see.

The chat stream and the run endpoints (`POST /api/v1/chat`, `/api/v1/runs/<run_id>/events`,
`…/stop`, `…/approvals`) are plain async Django views: a DRF view is sync, and Django would then
buffer the whole stream (STYLE.md). drf-spectacular only reads DRF views: its endpoint
enumerator skips every callback without a DRF view class behind it, so `@extend_schema` and an
`OpenApiViewExtension` (which swaps one DRF view class for another) never reach a plain function,
and a preprocessing hook is only handed the DRF endpoints it already found. Its maintainer's
answer for plain Django views is that there is no such path (tfranzel/drf-spectacular#931).

So the four operations are written here in the document's own terms and added by a
postprocessing hook, `async_views_describe` (SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"]): no
route, view or serializer exists only for the schema. The hook adds their component schemas
to the generator's component registry, which is how drf-spectacular's own enum hook adds
components. That hook runs after this one, so these choices become enum components
(`DecisionEnum` …), the same as a serializer's would.

The frames are described from the runtime's event types (agents_app.runtime.events: each has its
`FRAME_SCHEMA`), plus the `session` frame the run sends first; chat_app/tests/gateways/test_stream_schema.py
holds the frames the server sends to this description, and checks that every path added here is
routed to the async view it describes.
"""
import copy

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.plumbing import ResolvedComponent
from drf_spectacular.settings import spectacular_settings

from agents_app.runtime.events import EVENT_TYPES, frame_schema


class JwtAuthenticationScheme(OpenApiAuthenticationExtension):
    target_class = "chat_app.accounts.authentication.JwtAuthentication"
    name = "jwtAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}


class SessionAuthenticationScheme(OpenApiAuthenticationExtension):
    target_class = "chat_app.accounts.authentication.SessionAuthentication"
    name = "cookieAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "cookie", "name": "sessionid", "description": "页面的 Django 会话（POST 需 X-CSRFToken）"}


# The async views take the same callers as the REST views (chat_app.accounts.authentication). Both schemes
# are registered by the REST views, which carry these authentication classes.
_SECURITY = [{JwtAuthenticationScheme.name: []}, {SessionAuthenticationScheme.name: []}]

# --- the frames (the body of both SSE responses) ---------------------------------------------

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

SSE_EXAMPLE = (
    'data: {"type":"session","conversation_id":"8c0f…","message_id":"5e2a…","request_id":"3f2a9c1d4b5e6f70",'
    '"run_id":"b71d…"}\n\n'
    'id: 1\ndata: {"type":"chunk","content":"今天"}\n\n'
    ": ping\n\n"
    'id: 2\ndata: {"type":"done","full_text":"今天一食堂有…","message_id":"5e2a…","chart":null}\n\n'
)

# --- component schemas (registered by the hook; `Error` is chat_app.gateways.api.serializers.ErrorSerializer's,
# registered by the REST views) -----------------------------------------------------------------

_COMPONENTS = {
    "RunStatus": {
        "type": "object",
        "properties": {
            "status": {
                "enum": ["stopping", "finished"],
                "type": "string",
                "description": "* `stopping` - 正在停止（202）\n* `finished` - 已经结束（200）",
            },
        },
        "required": ["status"],
    },
    "ApprovalDecision": {
        "type": "object",
        "description": "批准或授权的调用用 decision；回答 MCP 服务问题（elicitation_required）的调用用 action 和 content",
        "properties": {
            "call_id": {"type": "string", "description": "approval_required、authorization_required 或 "
                        "elicitation_required 帧的 call_id", "maxLength": 128},
            "decision": {
                "enum": ["approve", "reject"],
                "type": "string",
                "description": "* `approve` - 批准\n* `reject` - 拒绝（回答问题时等于 decline）",
            },
            "action": {
                "enum": ["accept", "decline", "cancel"],
                "type": "string",
                "description": "回答服务的问题：* `accept` - 提交（表单附 content）\n* `decline` - 拒绝回答\n* `cancel` - 取消",
            },
            "content": {"type": "object", "description": "accept 一个表单时各字段的值，须符合帧里的 schema"},
        },
        "required": ["call_id"],
    },
    "ApprovalAnswer": {
        "type": "object",
        "properties": {
            "call_id": {"type": "string"},
            "status": {
                "enum": ["approved", "rejected"],
                "type": "string",
                "description": "* `approved` - 已批准（回答问题时：已提交）\n* `rejected` - 已拒绝（回答问题时：拒绝或取消）",
            },
            "resumed": {"type": "boolean", "description": "这是本轮最后一个决定，运行已继续"},
        },
        "required": ["call_id", "resumed", "status"],
    },
}


def _ref(component: str) -> dict:
    return {"$ref": f"#/components/schemas/{component}"}


def _json(component: str, description: str) -> dict:
    return {"content": {"application/json": {"schema": _ref(component)}}, "description": description}


def _error(description: str, **headers) -> dict:
    return {**_json("Error", description), **({"headers": headers} if headers else {})}


_RETRY_AFTER = {"schema": {"type": "integer"}, "description": "多少秒后再试"}
_UNAUTHENTICATED = "40101 token_missing / token_invalid"
_CSRF = "40301 会话请求缺少 CSRF 令牌"
_TOO_LARGE = "41301 请求体过大（上限 64 KB）"
_NOT_JSON = "41501 Content-Type 不是 application/json（UTF-8）"


def _frames(description: str, **media) -> dict:
    return {"content": {"text/event-stream": {"schema": FRAME_SCHEMA, **media}}, "description": description}


# --- the operations --------------------------------------------------------------------------

_RUN_ID = {
    "in": "path",
    "name": "run_id",
    "schema": {"type": "string", "format": "uuid"},
    "description": "session 帧里的 run_id",
    "required": True,
}
_RUN_AUTH = "认证同 POST /api/v1/chat。别人的运行返回 404。"

CHAT_REQUEST_SCHEMA = {
    "type": "object",
    "required": ["message"],
    "properties": {
        "message": {"type": "string", "minLength": 1, "maxLength": 8000, "description": "去掉首尾空白后 1–8000 字"},
        "conversation_id": {"type": "string", "format": "uuid", "nullable": True, "description": "null 表示新对话"},
        "agent": {"type": "string", "nullable": True, "maxLength": 64, "description": "智能体标识（GET /api/v1/agents 列出的，你的用户组能用的）；null 用对话的智能体，否则默认的"},
        "hint_domain": {"type": "string", "nullable": True, "maxLength": 64},
    },
}

_OPERATIONS = {
    "/api/v1/chat": {
        "post": {
            "operationId": "chat_stream",
            "description": (
                "认证：`Authorization: Bearer <JWT>`，或页面的 Django 会话 + `X-CSRFToken`。"
                "响应头：`Cache-Control: no-cache`、`X-Accel-Buffering: no`、`X-Request-Id`。"
                "用户消息在调用模型之前保存；回答（客户端断开或失败时为部分回答并标记 interrupted）在本轮结束时保存。"
            ),
            "summary": "发送消息并以 SSE 流式接收回答",
            "tags": ["chat"],
            "requestBody": {"content": {"application/json": {"schema": CHAT_REQUEST_SCHEMA}}, "required": True},
            "security": _SECURITY,
            "responses": {
                "200": _frames("SSE 帧序列", examples={"一次简单回答": {"value": SSE_EXAMPLE}}),
                "400": _error(
                    "40001 请求体不是有效的 JSON 对象，或字段无效（消息为空或超过 8000 字、类型不对、conversation_id 不是 UUID、"
                    "智能体不存在、已停用或你所在的用户组不能用：三者回答相同）"
                ),
                "401": _error(_UNAUTHENTICATED),
                "403": _error(_CSRF),
                "404": _error("40401 对话不存在或不属于调用者"),
                "413": _error(_TOO_LARGE),
                "415": _error(_NOT_JSON),
                "429": _error(
                    "42901 同时进行的流过多；42902 发送过于频繁（带 Retry-After）；42904 今天的 token 额度已用完（Retry-After：到明天 0 点的秒数）",
                    **{"Retry-After": _RETRY_AFTER},
                ),
                "503": _error("50002 暂无可用的智能体（管理员还没有启用任何智能体）"),
            },
        },
    },
    "/api/v1/runs/{run_id}/events": {
        "get": {
            "operationId": "run_events",
            "description": _RUN_AUTH + "先重放 Last-Event-ID（请求头）或 ?after=N 之后的帧，再实时跟随到 done；"
            "已结束的运行重放仍保留的帧，日志过期后给出由保存的回答构造的 session 与 done。",
            "summary": "重新接上一次运行的 SSE 流",
            "parameters": [
                {"in": "header", "name": "Last-Event-ID", "schema": {"type": "string"}},
                {"in": "query", "name": "after", "schema": {"type": "integer"},
                 "description": "已收到的最后一帧序号（没有 Last-Event-ID 时用）"},
                _RUN_ID,
            ],
            "tags": ["chat"],
            "security": _SECURITY,
            "responses": {
                "200": _frames("SSE 帧序列"),
                "400": _error("40001 Last-Event-ID / after 不是非负整数"),
                "401": _error(_UNAUTHENTICATED),
                "404": _error("40401 运行不存在"),
            },
        },
    },
    "/api/v1/runs/{run_id}/stop": {
        "post": {
            "operationId": "run_stop",
            "description": _RUN_AUTH + "运行及其正在执行的工具在 1 秒内取消（等待批准的运行直接结束，待批准的调用记为未执行），"
            "已生成的部分回答保存并标记 interrupted。",
            "summary": "停止一次运行",
            "parameters": [_RUN_ID],
            "tags": ["chat"],
            "security": _SECURITY,
            "responses": {
                "202": _json("RunStatus", '{"status": "stopping"}'),
                "200": _json("RunStatus", '{"status": "finished"}：运行已经结束'),
                "401": _error(_UNAUTHENTICATED),
                "403": _error(_CSRF),
                "404": _error("40401 运行不存在"),
                "409": _error("40904 运行在另一个服务进程上，未配置 REDIS_URL 时无法从这里停止"),
            },
        },
    },
    "/api/v1/runs/{run_id}/approvals": {
        "post": {
            "operationId": "run_approval_decide",
            "description": _RUN_AUTH + "approval_required 帧里的 call_id。同一轮的多个调用逐个决定；最后一个决定后运行在处理该请求的"
            "进程上继续（resumed: true），帧照常出现在原来的流里。拒绝或超时（APPROVAL_TIMEOUT_SEC）作为工具结果告诉模型。"
            "elicitation_required 的调用用 action（accept / decline / cancel）和表单的 content 回答：调用重新运行，"
            "服务收到这个回答；超时则服务只收到 cancel。",
            "summary": "批准、拒绝一个等待中的工具调用，或回答 MCP 服务提出的问题",
            "parameters": [_RUN_ID],
            "tags": ["chat"],
            "requestBody": {"content": {"application/json": {"schema": _ref("ApprovalDecision")}}, "required": True},
            "security": _SECURITY,
            "responses": {
                "200": _json("ApprovalAnswer", "决定已记下；resumed: true 时这是本轮最后一个决定，运行已继续"),
                "400": _error("40001 call_id、decision 或 action 无效，或回答不符合服务的表单"),
                "401": _error(_UNAUTHENTICATED),
                "403": _error(_CSRF),
                "404": _error("40401 运行不存在，或它没有这个等待批准的调用"),
                "409": _error("40903 运行没有在等待批准，或这个调用已有结果（超时的也算）"),
                "413": _error(_TOO_LARGE),
                "415": _error(_NOT_JSON),
                "429": _error(
                    "最后一个决定让运行像新一轮一样被接纳：42901 同时进行的流过多；42904 今天的 token 额度已用完"
                    "（Retry-After：到明天 0 点的秒数）。被拒时什么都不记录，运行仍在等待，可以稍后再决定",
                    **{"Retry-After": _RETRY_AFTER},
                ),
            },
        },
    },
}


def _path_order(path: str) -> str:
    # drf-spectacular's alpha_operation_sorter: by path, a `{parameter}` before a literal segment.
    return path.replace("{", "!")


def async_views_describe(result, generator, **kwargs):
    """Postprocessing hook: adds the async views' operations and their component schemas.

    Copies go into the document: the enum hook after this one rewrites the component schemas
    it is given in place, and the next document must start from these again.
    """
    for name, schema in _COMPONENTS.items():
        generator.registry.register_on_missing(
            ResolvedComponent(name=name, type=ResolvedComponent.SCHEMA, object=name, schema=copy.deepcopy(schema))
        )
    result["components"] = generator.registry.build(spectacular_settings.APPEND_COMPONENTS)

    paths = result.setdefault("paths", {})
    for path, operations in _OPERATIONS.items():
        documented = paths.setdefault(path, {})
        if documented.keys() & operations.keys():
            raise ValueError(f"{path} is described twice: by a DRF view and by chat_app.gateways.api.schema")
        documented.update(copy.deepcopy(operations))
    result["paths"] = {path: paths[path] for path in sorted(paths, key=_path_order)}
    return result
