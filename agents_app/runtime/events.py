"""Typed events of one chat turn. `frame()` gives the frame's payload (docs/design.md#the-chat-stream); campus_agent.base.sse encodes it;
`FRAME_SCHEMA` describes that payload for the API's OpenAPI document (chat_app/gateways/api/schema.py builds
the stream's description from these, and a test holds each `frame()` to its schema).

The runtime yields these; chat_app stores what they describe and streams their frames, and the
tool loop builds the model's next request from them. Their text comes from outside (the model,
sub-agents, MCP servers), so each event makes its own text valid when it is built (`text_clean`:
no lone surrogate, no NUL): what the student is shown, what is stored and what the model is sent
back are then the same valid text, and none of those steps can fail on it.
"""
from dataclasses import dataclass, field
from typing import Any, ClassVar, get_args

from campus_agent.base.errors import CAMPUS_TOKEN_EXPIRED, DOWNSTREAM, GENERAL, SUBAGENT_INTERNAL
from campus_agent.base.text import text_clean

_STRING = {"type": "string"}
_FLAG = {"type": "boolean", "enum": [True]}  # present only when true


def frame_schema(type_: str, description: str, *, required: dict, optional: dict | None = None) -> dict:
    """The OpenAPI (3.0) schema of one frame payload: `type` is `type_`, `required` fields always
    present, `optional` ones only sometimes."""
    return {
        "type": "object",
        "title": type_,
        "description": description,
        "properties": {"type": {"type": "string", "enum": [type_]}, **required, **(optional or {})},
        "required": ["type", *required],
    }


def _clean_fields(event, *names: str) -> None:
    for name in names:
        value = getattr(event, name)
        cleaned = text_clean(value)
        if cleaned is not value:
            object.__setattr__(event, name, cleaned)  # frozen: set once, while being built


@dataclass(frozen=True, slots=True)
class Chunk:
    """A delta of the model's own text (or, with `fallback`, of the keyword-routing answer)."""

    content: str
    fallback: bool = False  # written by keyword routing, not by the model (issue #6)

    FRAME_SCHEMA: ClassVar[dict] = frame_schema(
        "chunk", "模型文本增量（fallback: 关键词路由写的）", required={"content": _STRING}, optional={"fallback": _FLAG}
    )

    def __post_init__(self) -> None:
        _clean_fields(self, "content")

    def frame(self) -> dict:
        payload = {"type": "chunk", "content": self.content}
        if self.fallback:
            payload["fallback"] = True
        return payload


@dataclass(frozen=True, slots=True)
class Reasoning:
    """A delta of a thinking model's reasoning (docs/design.md#the-tool-loop): shown apart from the answer, kept on
    the assistant row's `meta.reasoning`, never part of the reply's text nor sent back as text (a
    round that called tools has it sent back as `reasoning_content`: runtime/reasoning.py)."""

    content: str

    FRAME_SCHEMA: ClassVar[dict] = frame_schema(
        "reasoning", "思考模型的推理过程增量，与回答分开（不计入 done.full_text）", required={"content": _STRING}
    )

    def __post_init__(self) -> None:
        _clean_fields(self, "content")

    def frame(self) -> dict:
        return {"type": "reasoning", "content": self.content}


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool starts. Emitted once the model's streamed call is complete; the model text streamed
    earlier in the same round belongs to the assistant `tool_calls` message."""

    call_id: str
    tool: str
    args: str  # JSON text, as the model wrote it (normalised to "{}" when not an object)

    FRAME_SCHEMA: ClassVar[dict] = frame_schema(
        "tool_call", "工具开始",
        required={"call_id": _STRING, "tool": _STRING, "args": {"type": "string", "description": "JSON 文本"}},
    )

    def __post_init__(self) -> None:
        _clean_fields(self, "call_id", "tool", "args")

    def frame(self) -> dict:
        return {"type": "tool_call", "call_id": self.call_id, "tool": self.tool, "args": self.args}


@dataclass(frozen=True, slots=True)
class ToolChunk:
    """A sub-agent's own text, streamed live while the tool runs."""

    call_id: str
    tool: str
    content: str

    FRAME_SCHEMA: ClassVar[dict] = frame_schema(
        "tool_chunk", "子 Agent 自己的文本，实时转发", required={"call_id": _STRING, "tool": _STRING, "content": _STRING}
    )

    def __post_init__(self) -> None:
        _clean_fields(self, "content")

    def frame(self) -> dict:
        return {"type": "tool_chunk", "call_id": self.call_id, "tool": self.tool, "content": self.content}


@dataclass(frozen=True, slots=True)
class ToolResult:
    """A tool ended. It carries two texts for two readers:

    - `content` is for the model (the tool message) and the stored tool row: the full story,
      failure reasons included (`调用子 Agent 失败: All connection attempts failed`);
    - `error` (failures only) is for the student: a sentence in Chinese that names no
      exception, sent in the `tool_result` frame (the page's red box) and, when keyword routing
      answers without a model, used as the answer. It is never given to the model.
    """

    call_id: str
    tool: str
    ok: bool
    content: str
    error: str | None = None
    chart: dict | None = None
    # For the page only, each sent when present (an MCP tool's result, docs/api.md):
    links: list[dict] | None = None  # [{uri, name}]: resource links, http(s) only
    images: list[dict] | None = None  # [{src}]: data: URLs of a trusted service's images
    label: str | None = None  # the tool's own title, when staff gave its service no display name
    sources: list[dict] | None = None  # a knowledge collection's passages: where each comes from
    # Not a frame: what keyword routing shows the student in place of `content` (ToolOutcome.shown).
    shown: str | None = None
    # The call was cut (the run stopped, failed or ran out of time before it answered): sent by
    # the run for every such call before its `done`, so no `tool_call` is left without a result.
    interrupted: bool = False
    # Not a frame: the call needs the student's authorization of its service first
    # (runtime/tool.py AuthorizationNeeded); the loop waits for it instead of taking this result.
    authorization: object | None = None
    # Not a frame either: the call's server asked the student something (ElicitationNeeded); the
    # loop waits for their answer and runs the call again.
    elicitation: object | None = None

    FRAME_SCHEMA: ClassVar[dict] = frame_schema(
        "tool_result", "工具结束；error 只在失败时出现，是给学生看的中文说明",
        required={"call_id": _STRING, "tool": _STRING, "ok": {"type": "boolean"}},
        optional={
            "error": _STRING,
            "interrupted": {"type": "boolean", "description": "调用被中断（停止、失败或超时），没有返回结果；ok 为 false"},
            "links": {
                "type": "array", "description": "MCP 工具返回的资源链接（只含 http/https）",
                "items": {"type": "object", "properties": {"uri": _STRING, "name": _STRING}, "required": ["uri", "name"]},
            },
            "images": {
                "type": "array", "description": "可信 MCP 服务返回的图片（data: URL）",
                "items": {"type": "object", "properties": {"src": _STRING}, "required": ["src"]},
            },
            "label": {"type": "string", "description": "工具自己的显示名（MCP 工具的 title），服务未设显示名称时才有"},
            "sources": {
                "type": "array", "description": "知识库检索结果各段落的出处（n 为段落编号，url 打开文件，只对能读该知识库的人）",
                "items": {"type": "object", "properties": {
                    "n": {"type": "integer"}, "document_id": {"type": "integer"}, "title": _STRING,
                    "page": {"type": "integer", "nullable": True}, "heading": _STRING, "url": _STRING},
                    "required": ["n", "document_id", "title", "page", "heading", "url"]},
            },
        },
    )

    def __post_init__(self) -> None:
        _clean_fields(self, "content", "error", "chart", "links", "label", "sources", "shown")

    def frame(self) -> dict:
        payload = {"type": "tool_result", "call_id": self.call_id, "tool": self.tool, "ok": self.ok}
        if self.error:
            payload["error"] = self.error
        if self.interrupted:
            payload["interrupted"] = True
        for name in ("links", "images", "label", "sources"):
            if value := getattr(self, name):
                payload[name] = value
        return payload


@dataclass(frozen=True, slots=True)
class ApprovalRequired:
    """A tool the model called waits for the student's decision (docs/design.md#runs): it runs only once
    approved (`POST /api/v1/runs/<run_id>/approvals`); a rejection or `expires_at` passing is
    its result instead. Its `tool_call` frame came first."""

    call_id: str
    tool: str
    args: str  # JSON text, as in `tool_call`
    expires_at: str  # ISO 8601, UTC

    FRAME_SCHEMA: ClassVar[dict] = frame_schema(
        "approval_required", "工具运行前等待学生批准；在 expires_at 前用 POST /api/v1/runs/<run_id>/approvals 决定，"
        "超时视为拒绝",
        required={
            "call_id": _STRING, "tool": _STRING, "args": {"type": "string", "description": "JSON 文本"},
            "expires_at": {"type": "string", "format": "date-time"},
        },
    )

    def __post_init__(self) -> None:
        _clean_fields(self, "call_id", "tool", "args")

    def frame(self) -> dict:
        return {"type": "approval_required", "call_id": self.call_id, "tool": self.tool, "args": self.args,
                "expires_at": self.expires_at}


@dataclass(frozen=True, slots=True)
class AuthorizationRequired:
    """A tool the model called needs the student's own authorization of its MCP service first
    (agents_app/mcp/oauth.py): the student visits `url`, the authorization server's page, whose
    answer comes back to the gateway and runs the call; declining it (`POST
    /api/v1/runs/<run_id>/approvals` with `reject`) or `expires_at` passing is its result
    instead. Its `tool_call` frame came first."""

    call_id: str
    tool: str
    args: str
    service: str  # the service's display name
    url: str
    expires_at: str
    service_id: int | None = None  # not in the frame: which McpService (the callback finds the call by it)

    FRAME_SCHEMA: ClassVar[dict] = frame_schema(
        "authorization_required", "工具调用前需要学生用自己的账号授权 MCP 服务：打开 url 授权后自动继续；"
        "用 POST /api/v1/runs/<run_id>/approvals（decision: reject）表示不连接，超时视为不连接",
        required={
            "call_id": _STRING, "tool": _STRING, "args": {"type": "string", "description": "JSON 文本"},
            "service": {"type": "string", "description": "服务的显示名称"},
            "url": {"type": "string", "format": "uri", "description": "授权服务器的授权页面"},
            "expires_at": {"type": "string", "format": "date-time"},
        },
    )

    def __post_init__(self) -> None:
        _clean_fields(self, "call_id", "tool", "args", "service")

    def frame(self) -> dict:
        return {"type": "authorization_required", "call_id": self.call_id, "tool": self.tool, "args": self.args,
                "service": self.service, "url": self.url, "expires_at": self.expires_at}


@dataclass(frozen=True, slots=True)
class ElicitationRequired:
    """The MCP server of a tool the model called asks the student something before it goes on (an
    elicitation, agents_app/mcp/person.py): a form (`mode` "form": `message`, the JSON Schema
    `schema` of its fields, `defaults` the form shows filled in, SEP-1034) or a page to visit
    (`mode` "url": `url`). The student answers with `POST /api/v1/runs/<run_id>/approvals`
    (`action` accept, decline or cancel; a form's `content`); the call then runs again and its
    server is given that answer. `expires_at` passing leaves the server with "cancel". Its
    `tool_call` frame came first."""

    call_id: str
    tool: str
    args: str
    service: str
    message: str
    mode: str  # "form" | "url"
    expires_at: str
    schema: dict = field(default_factory=dict)
    defaults: dict = field(default_factory=dict)
    url: str = ""
    resume: dict = field(default_factory=dict)  # not in the frame: handed back to the tool with the answer

    FRAME_SCHEMA: ClassVar[dict] = frame_schema(
        "elicitation_required", "工具的 MCP 服务需要学生回答问题后才能继续：mode 为 form 时按 schema 填表，"
        "mode 为 url 时打开 url；用 POST /api/v1/runs/<run_id>/approvals（action: accept / decline / cancel，"
        "表单的 content）回答，超时视为取消",
        required={
            "call_id": _STRING, "tool": _STRING, "args": {"type": "string", "description": "JSON 文本"},
            "service": {"type": "string", "description": "服务的显示名称"},
            "message": {"type": "string", "description": "服务向学生提出的问题"},
            "mode": {"type": "string", "enum": ["form", "url"]},
            "expires_at": {"type": "string", "format": "date-time"},
        },
        optional={
            "schema": {"type": "object", "description": "表单字段的 JSON Schema（mode 为 form 时）"},
            "defaults": {"type": "object", "description": "表单预先填好的值（schema 里各字段的 default，SEP-1034）"},
            "url": {"type": "string", "format": "uri", "description": "要打开的页面（mode 为 url 时，只有 http/https）"},
        },
    )

    def __post_init__(self) -> None:
        _clean_fields(self, "call_id", "tool", "args", "service", "message", "url")

    def frame(self) -> dict:
        payload = {"type": "elicitation_required", "call_id": self.call_id, "tool": self.tool, "args": self.args,
                   "service": self.service, "message": self.message, "mode": self.mode, "expires_at": self.expires_at}
        if self.mode == "url":
            payload["url"] = self.url
        else:
            payload["schema"], payload["defaults"] = self.schema, self.defaults
        return payload


WaitingCall = ApprovalRequired | AuthorizationRequired | ElicitationRequired
# The frames of a call that waits for the student; the stream of a run that pauses ends after them.
WAITING_FRAME_TYPES = ("approval_required", "authorization_required", "elicitation_required")


@dataclass(frozen=True, slots=True)
class Paused:
    """Not a frame: the turn's last item instead of `Done` when calls wait for the student (their
    approval, their authorization of a service, or their answer to a server's question). `state` is
    what resuming needs (JSON: round count, text, usage, chart); `waiting` the calls that wait."""

    state: dict
    waiting: tuple[WaitingCall, ...]


@dataclass(frozen=True, slots=True)
class Error:
    """A failure the student is told about (`message` is student-facing, like ToolResult.error)."""

    code: int
    message: str

    FRAME_SCHEMA: ClassVar[dict] = frame_schema(
        "error", "任何失败；随后仍有 done",
        required={
            "code": {"type": "integer", "enum": [CAMPUS_TOKEN_EXPIRED, SUBAGENT_INTERNAL, GENERAL, DOWNSTREAM]},
            "message": _STRING,
        },
    )

    def __post_init__(self) -> None:
        _clean_fields(self, "message")

    def frame(self) -> dict:
        return {"type": "error", "code": self.code, "message": self.message}


@dataclass(frozen=True, slots=True)
class Moderation:
    """A moderation word list matched (docs/design.md#content-safety-and-labels): what was done
    and the list's category, never the word."""

    stage: str  # "question" | "answer" | "reasoning"
    action: str  # "block" | "mask"
    category: str
    # Not in the frame: the text a `block` stopped, for the audit only (never shown, stored as a
    # reply or sent back to the model).
    held: str = ""

    FRAME_SCHEMA: ClassVar[dict] = frame_schema(
        "moderation", "内容安全命中：stage 为 question 时 block 表示问题未发给模型（随后是固定回答和 done）；"
        "answer / reasoning 的 block 表示回答在此停止（随后是结束提示和 interrupted 的 done；工具文本的 block "
        "只略去该工具的内容，回答继续）；mask 表示命中的词已打码。category 是词表的类别，不含词本身",
        required={
            "stage": {"type": "string", "enum": ["question", "answer", "reasoning"]},
            "action": {"type": "string", "enum": ["block", "mask"]},
            "category": _STRING,
        },
    )

    def __post_init__(self) -> None:
        _clean_fields(self, "category")

    def frame(self) -> dict:
        return {"type": "moderation", "stage": self.stage, "action": self.action, "category": self.category}


# Why a model ended its answer before it was complete, in its own `finish_reason` (OpenAI's two
# words; Zhipu GLM says `sensitive` for its filter): the reply is stored and shown as cut, and
# `/v1` passes the reason on (docs/design.md#the-tool-loop).
CUT_LENGTH = "length"
CUT_CONTENT_FILTER = "content_filter"
CUT_REASONS = (CUT_LENGTH, CUT_CONTENT_FILTER)


@dataclass(frozen=True, slots=True)
class Done:
    """The turn ended. Always last. `interrupted` when a failure cut the answer; `interrupted_reason`
    when the model itself ended it early (one of CUT_REASONS)."""

    full_text: str
    chart: dict | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    interrupted: bool = False
    interrupted_reason: str | None = None
    fallback: bool = False  # the turn was answered by keyword routing (issue #6)
    provider: str | None = None  # the provider whose model answered (its admin name, or "default")
    model: str | None = None  # the model it was asked for
    sources: list[dict] | None = None  # the knowledge passages the model read this turn (ToolResult.sources + call_id)

    FRAME_SCHEMA: ClassVar[dict] = frame_schema(
        "done", "最后一帧；message_id 是保存的回答消息的 ID；interrupted: 回答被中断（失败、超时、停止，或模型自己截断：见 interrupted_reason）",
        required={
            "full_text": _STRING,
            "message_id": _STRING,
            "chart": {"type": "object", "nullable": True, "description": "图表数据（见 docs/api.md）或 null"},
        },
        optional={
            "fallback": _FLAG,
            "interrupted": _FLAG,
            "interrupted_reason": {"type": "string", "enum": list(CUT_REASONS),
                                   "description": "模型自己提前结束了回答（interrupted 为 true）：length 达到长度上限"
                                                  "（max_tokens，思考模型的推理也计入），content_filter 被模型服务的内容审核拦截"},
            "usage": {"type": "object", "description": "模型报告的 token 用量（prompt_tokens、completion_tokens、"
                      "total_tokens、prompt_tokens_details.cached_tokens）；关键词路由的回答没有"},
            "provider": {"type": "string", "description": "回答的模型提供方（后台的名称；default 为环境变量 LLM_* 配置的）；"
                         "关键词路由的回答没有"},
            "model": {"type": "string", "description": "回答所用的模型；关键词路由的回答没有"},
            "sources": {
                "type": "array", "description": "本轮模型读过的知识库段落的出处（同 tool_result 的 sources，另有 call_id："
                                                "每次检索的段落各自从 1 编号）",
                "items": {"type": "object", "properties": {
                    "call_id": _STRING, "n": {"type": "integer"}, "document_id": {"type": "integer"}, "title": _STRING,
                    "page": {"type": "integer", "nullable": True}, "heading": _STRING, "url": _STRING},
                    "required": ["call_id", "n", "document_id", "title", "page", "heading", "url"]},
            },
        },
    )

    def __post_init__(self) -> None:
        _clean_fields(self, "full_text", "chart", "usage", "provider", "model", "sources")

    def frame(self, *, message_id: str) -> dict:
        payload = {"type": "done", "full_text": self.full_text, "message_id": message_id, "chart": self.chart}
        if self.fallback:
            payload["fallback"] = True
        if self.interrupted:  # the page marks the reply as cut at once, not only after a reload
            payload["interrupted"] = True
            if self.interrupted_reason:
                payload["interrupted_reason"] = self.interrupted_reason
        if self.usage:  # what the turn cost, as the model reported it (summed over its rounds)
            payload["usage"] = self.usage
        if self.provider:  # who answered (a fallback provider, when the agent's own was down)
            payload["provider"] = self.provider
        if self.model:
            payload["model"] = self.model
        if self.sources:
            payload["sources"] = self.sources
        return payload


Event = (Chunk | Reasoning | ToolCall | ToolChunk | ToolResult | ApprovalRequired | AuthorizationRequired
         | ElicitationRequired | Moderation | Error | Done)
EVENT_TYPES: tuple[type, ...] = get_args(Event)
