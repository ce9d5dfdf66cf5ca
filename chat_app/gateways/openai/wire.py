"""The OpenAI Chat Completions wire format of `/v1` (docs/design.md#other-clients, docs/clients.md): the request
body read into a `CompletionRequest`, the run's frames turned into completion text, chunks and
bodies, and errors in OpenAI's shape `{"error": {"message", "type", "param", "code"}}`.

No I/O here: chat_app.gateways.openai.views reads the request, starts the turn and writes what this
module builds.
"""
from __future__ import annotations

import base64
import binascii
import json
import uuid
from dataclasses import dataclass, field

import filetype
from django.conf import settings
from django.http import JsonResponse
from django.utils.text import format_lazy
from django.utils.translation import gettext_lazy as _

from agents_app.runtime.events import CUT_REASONS, WAITING_FRAME_TYPES
from campus_agent.base import errors
from campus_agent.base.errors import INVALID_BODY
from chat_app.conversations.uploads import IMAGE_TYPES, MSG_TOO_LARGE, size_text
from chat_app.gateways.answer_text import AnswerText
from chat_app.runs.chat_input import AGENT_SLUG_MAX, MESSAGE_MAX
from chat_app.runs.quota import QUOTA_EXCEEDED
from safety_app.labels import AIGC_KEY

SOURCES_KEY = "sources"  # beside `choices`: the knowledge passages an answer read (docs/clients.md)

OWNED_BY = "campus-agent"
ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
# Where a client may name the conversation to continue (the SDK: extra_body / metadata / a header).
CONVERSATION_HEADER = "X-Conversation-Id"
CONVERSATION_META = "HTTP_X_CONVERSATION_ID"

MSG_MODEL_MISSING = _("model 必须是智能体的标识（GET /v1/models 列出可用的）。")
MSG_MODEL_UNKNOWN = _("模型 {model} 不存在或已停用（GET /v1/models 列出可用的）。")
MSG_MESSAGES_MISSING = _("messages 必须是非空数组。")
MSG_MESSAGES_TOO_MANY = _("messages 不能超过 {limit} 条。")
MSG_MESSAGE_SHAPE = _("messages[{i}] 必须是含 role 和 content 的对象。")
MSG_ROLE = _("messages[{i}].role 不正确（可用：system、developer、user、assistant、tool）。")
MSG_CONTENT_TYPE = _("messages[{i}].content 必须是字符串或内容片段数组。")
MSG_CONTENT_NUL = _("messages[{i}].content 不能包含空字符（\\u0000）。")
MSG_LAST_NOT_USER = _("最后一条消息必须是用户（role: user）的问题。")
MSG_QUESTION_EMPTY = _("最后一条用户消息不能为空。")
MSG_QUESTION_TOO_LONG = format_lazy(_("最后一条用户消息不能超过 {limit} 个字符。"), limit=MESSAGE_MAX)
MSG_NOT_TEXT = _("暂不支持音频和文件：请发送文字和图片（image_url）；文件可在网页上附加，或经 POST /api/v1/uploads 上传后用 POST /api/v1/chat 发送。")
MSG_IMAGE_URL = _("图片请以 data: URL 发送（data:image/png;base64,…）：网关不下载网址。")
MSG_IMAGE_DATA = _("messages[{i}] 中的图片不是有效的 base64 图片（PNG、JPEG、WebP 或 GIF）。")
MSG_IMAGES_TOO_MANY = _("一条消息最多 {limit} 张图片。")
MSG_N = _("只支持 n = 1。")
MSG_TOOL_CHOICE = _("不支持客户端工具：校园小智自己调用服务端工具，tool_choice 只能是 auto 或 none。")
MSG_RESPONSE_FORMAT = _("不支持 response_format（JSON 输出），请去掉这个参数。")
MSG_STREAM = _("stream 必须是布尔值。")
MSG_CONVERSATION_ID = _("conversation_id 不是有效的对话 ID。")

# Seconds a client waits before asking again when all its streams are busy (the official SDK
# retries a 429 by itself, honouring Retry-After up to 60 s).
STREAMS_RETRY_AFTER = "5"


class OpenAiError(errors.ApiError):
    """An error answered in OpenAI's shape; `param` names the field at fault."""

    def __init__(self, message: str, *, status: int = 400, param: str | None = None, type_: str = "invalid_request_error",
                 code: str | None = None, headers: dict | None = None):
        super().__init__(message, code=INVALID_BODY, status=status, headers=headers)
        self.param, self.type, self.wire_code = param, type_, code


def invalid(message: str, *, param: str | None = None) -> OpenAiError:
    return OpenAiError(message, param=param)


def model_not_found(model: str) -> OpenAiError:
    return OpenAiError(MSG_MODEL_UNKNOWN.format(model=model[:AGENT_SLUG_MAX]), status=404, param="model",
                       code="model_not_found")


_STATUS_TYPES = {401: ("authentication_error", "invalid_api_key"), 404: ("invalid_request_error", "not_found"),
                 405: ("invalid_request_error", "method_not_allowed"), 409: ("invalid_request_error", "conversation_busy"),
                 413: ("invalid_request_error", "body_too_large"),
                 415: ("invalid_request_error", "unsupported_media_type")}
# Our 429s: (type, code, extra headers). A retry helps only when a stream ends; not in the
# rate's minute or the quota's day (`x-should-retry: false` stops the SDK's own retries).
_LIMITS = {
    errors.TOO_MANY_STREAMS: ("rate_limit_error", "too_many_streams",
                              {"Retry-After": STREAMS_RETRY_AFTER}),
    errors.RATE_LIMITED: ("rate_limit_error", "rate_limit_exceeded", {"x-should-retry": "false"}),
    QUOTA_EXCEEDED: ("insufficient_quota", "insufficient_quota", {"x-should-retry": "false"}),
}


def error_response(exc: errors.ApiError) -> JsonResponse:
    """Any ApiError of the turn's way (auth, body, limits, admission) in OpenAI's shape, with its
    status and headers (Retry-After of a 429 kept, or set)."""
    headers = dict(exc.headers)
    status, message = exc.status, exc.message
    if isinstance(exc, OpenAiError):
        type_, code, param = exc.type, exc.wire_code, exc.param
    elif exc.status == 429:
        type_, code, extra = _LIMITS.get(exc.code, ("rate_limit_error", "rate_limit_exceeded", {}))
        headers = {**extra, **headers}
        param = None
    else:
        type_, code = _STATUS_TYPES.get(status, ("invalid_request_error", None))
        param = None
        if status == 401:
            message = _("API 密钥无效或已吊销（在网页的「API 密钥」面板创建一把）。")
            code = "invalid_api_key" if exc.message == errors.TOKEN_INVALID_MESSAGE else "missing_api_key"
        elif status == 404 and exc.message == errors.MSG_NOT_FOUND:
            param, code = "conversation_id", "conversation_not_found"
    body = {"error": {"message": message, "type": type_, "param": param, "code": code}}
    response = JsonResponse(body, status=status, json_dumps_params={"ensure_ascii": False})
    for name, value in headers.items():
        response[name] = value
    return response


# --- the request -------------------------------------------------------------------------------
@dataclass(frozen=True)
class CompletionRequest:
    model: str
    question: str  # the last user message, as stored
    earlier_questions: tuple[str, ...]  # the client's earlier user messages (finding the conversation)
    earlier_answers: tuple[str, ...]  # its assistant messages (to tell apart conversations asking the same)
    # Its earlier user and assistant text messages in order, (role, text), empty ones left out:
    # the opening of a new conversation when they continue no stored one (`client_opening`).
    earlier: tuple[tuple[str, str], ...] = ()
    stream: bool = False
    include_usage: bool = False
    conversation_id: uuid.UUID | None = None
    # The question's images (`image_url` parts, data: URLs decoded), in order: kept as the
    # caller's uploads and sent as its attachments (docs/design.md#attachments).
    images: tuple[bytes, ...] = ()


def _image_of(part: dict, i: int) -> bytes:
    """An `image_url` part's image: a base64 data: URL of a PNG, JPEG, WebP or GIF (the type read
    from the bytes, as for an upload), at most UPLOAD_MAX_BYTES. A web address is refused: the
    gateway fetches nothing a client names."""
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else image
    param = f"messages[{i}].content"
    if not isinstance(url, str) or not url.startswith("data:"):
        raise invalid(MSG_IMAGE_URL, param=param)
    head, _comma, payload = url.partition(",")
    if not head.endswith(";base64"):
        raise invalid(MSG_IMAGE_DATA.format(i=i), param=param)
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise invalid(MSG_IMAGE_DATA.format(i=i), param=param) from None
    if len(data) > settings.UPLOAD_MAX_BYTES:
        raise errors.ApiError(MSG_TOO_LARGE.format(limit=size_text(settings.UPLOAD_MAX_BYTES)),
                              code=errors.BODY_TOO_LARGE, status=413)
    if filetype.guess_mime(data) not in IMAGE_TYPES:
        raise invalid(MSG_IMAGE_DATA.format(i=i), param=param)
    return data


def _content_of(content, i: int, *, question: bool) -> tuple[str, list[bytes]]:
    """A message's text (a string, or its text parts joined by newlines) and, for the question,
    its images. Audio and files in the question are refused; in earlier messages anything but
    text is left out."""
    images: list[bytes] = []
    if content is None:
        return "", images
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise invalid(MSG_CONTENT_TYPE.format(i=i), param=f"messages[{i}].content")
            if part["type"] == "text":
                if not isinstance(part.get("text"), str):
                    raise invalid(MSG_CONTENT_TYPE.format(i=i), param=f"messages[{i}].content")
                texts.append(part["text"])
            elif not question:
                continue
            elif part["type"] == "image_url":
                if len(images) >= settings.UPLOAD_MAX_PER_MESSAGE:
                    raise invalid(MSG_IMAGES_TOO_MANY.format(limit=settings.UPLOAD_MAX_PER_MESSAGE),
                                  param=f"messages[{i}].content")
                images.append(_image_of(part, i))
            else:
                raise invalid(MSG_NOT_TEXT, param=f"messages[{i}].content")
        text = "\n".join(texts)
    else:
        raise invalid(MSG_CONTENT_TYPE.format(i=i), param=f"messages[{i}].content")
    if "\x00" in text:
        raise invalid(MSG_CONTENT_NUL.format(i=i), param=f"messages[{i}].content")
    return text.strip(), images


def _conversation_id(body: dict, header: str | None) -> uuid.UUID | None:
    metadata = body.get("metadata")
    value = body.get("conversation_id")
    if value is None and isinstance(metadata, dict):
        value = metadata.get("conversation_id")
    if value is None:
        value = header
    if value is None:
        return None
    try:
        return uuid.UUID(value) if isinstance(value, str) and len(value) <= 64 else _bad_conversation_id()
    except ValueError:
        return _bad_conversation_id()


def _bad_conversation_id():
    raise invalid(MSG_CONVERSATION_ID, param="conversation_id")


def completion_request_parse(*, body: dict, conversation_header: str | None = None) -> CompletionRequest:
    """The body of `POST /v1/chat/completions`. Raises OpenAiError 400. What is honoured and
    what is ignored: docs/clients.md."""
    model = body.get("model")
    if not isinstance(model, str) or not model.strip() or "\x00" in model:
        raise invalid(MSG_MODEL_MISSING, param="model")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise invalid(MSG_MESSAGES_MISSING, param="messages")
    limit = settings.OPENAI_API_MESSAGES_MAX
    if len(messages) > limit:
        raise invalid(MSG_MESSAGES_TOO_MANY.format(limit=limit), param="messages")
    n = body.get("n")
    if n is not None and n != 1:
        raise invalid(MSG_N, param="n")
    tool_choice = body.get("tool_choice")
    if tool_choice is not None and tool_choice not in ("auto", "none"):
        raise invalid(MSG_TOOL_CHOICE, param="tool_choice")
    response_format = body.get("response_format")
    if response_format is not None and not (isinstance(response_format, dict) and response_format.get("type") == "text"):
        raise invalid(MSG_RESPONSE_FORMAT, param="response_format")
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise invalid(MSG_STREAM, param="stream")
    options = body.get("stream_options")
    include_usage = bool(stream) and isinstance(options, dict) and options.get("include_usage") is True

    questions, answers, earlier, images = [], [], [], []
    last = len(messages) - 1
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise invalid(MSG_MESSAGE_SHAPE.format(i=i), param=f"messages[{i}]")
        role = message.get("role")
        if role not in ROLES:
            raise invalid(MSG_ROLE.format(i=i), param=f"messages[{i}].role")
        if i == last and role != "user":
            raise invalid(MSG_LAST_NOT_USER, param="messages")
        text, parts = _content_of(message.get("content"), i, question=i == last)
        images += parts
        if role == "user":
            questions.append(text)
        elif role == "assistant":
            answers.append(text)
        if role in ("user", "assistant") and text and i != last:
            earlier.append((role, text))
        # system / developer (the client's own prompt) and tool messages are not used: the
        # agent's prompt and tools are (docs/clients.md).
    question = questions.pop()
    if not question:
        raise invalid(MSG_QUESTION_EMPTY, param="messages")
    if len(question) > MESSAGE_MAX:
        raise invalid(MSG_QUESTION_TOO_LONG, param="messages")
    return CompletionRequest(
        model=model.strip(),
        question=question,
        earlier_questions=tuple(questions),
        earlier_answers=tuple(answers),
        earlier=tuple(earlier),
        stream=bool(stream),
        include_usage=include_usage,
        conversation_id=_conversation_id(body, conversation_header),
        images=tuple(images),
    )


def client_opening(earlier: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """What of a client's own history opens a new conversation (docs/clients.md, "The
    conversation"): its latest user / assistant text messages, newest first while they fit in
    OPENAI_API_OPENING_MAX messages and OPENAI_API_OPENING_BYTES_MAX bytes of text, beginning with
    a user message. A question is kept whole or not at all (the client's next request is matched
    by its questions); an answer keeps at most a quarter of the bytes, its beginning, so one long
    answer cannot crowd out the turns before it."""
    kept: list[tuple[str, str]] = []
    room = settings.OPENAI_API_OPENING_BYTES_MAX
    answer_max = max(room // 4, 1)
    for role, text in reversed(earlier):
        if len(kept) >= settings.OPENAI_API_OPENING_MAX:
            break
        encoded = text.encode()
        if role == "assistant" and len(encoded) > min(answer_max, room):
            encoded = encoded[:min(answer_max, room)]
            text = encoded.decode(errors="ignore")
        if not encoded or len(encoded) > room:
            break
        kept.append((role, text))
        room -= len(encoded)
    kept.reverse()
    while kept and kept[0][0] != "user":
        kept.pop(0)
    return tuple(kept)


# --- the answer --------------------------------------------------------------------------------
NOTICE_ERROR = "⚠️ {message}"
NOTICE_APPROVAL = _("🔒「{tool}」需要你批准后才能运行。请在网页上打开 {url} 批准或拒绝"
                   "（{expires} 前有效），回答会在那里继续。")
NOTICE_WAITING = _("🔒「{tool}」需要你先在网页上连接账号或回答服务提出的问题。请打开 {url} 完成"
                  "（{expires} 前有效），回答会在那里继续。")
TOOL_STARTS = _("🔧 调用 {tool}…\n")
TOOL_OK = _("✅ {tool} 完成\n")
TOOL_FAILED = "⚠️ {tool}：{error}\n"
TOOL_CUT = _("⏹ {tool} 已中断\n")


@dataclass
class Translation:
    """The run's frames as OpenAI output, one frame at a time: `feed(frame)` returns the pieces
    it adds, each ("content" | "reasoning", text); `ended` once the client's answer is complete
    (the run's `done`, or an approval the client cannot give: the run waits on the page)."""

    page_url: str  # the conversation's page, for an approval: "https://…/c/<id>/"
    # The names staff gave the tools (chat_app.gateways.catalog.tool_labels: sub-agents by tool name,
    # MCP services by their tools' `<service>__` prefix).
    labels: dict = field(default_factory=dict)
    finish_reason: str = "stop"
    usage: dict | None = None
    ended: bool = False
    # Who answered (the `done` frame's): the answer's implicit label names them.
    provider: str = ""
    model: str = ""
    sources: list = field(default_factory=list)  # the knowledge passages the answer read (`done`'s)
    # The content: a tool call or a notice ends a paragraph, the text after it starts a new one.
    answer: AnswerText = field(default_factory=AnswerText)
    _line_open: bool = False  # the reasoning_content so far ends inside a line

    def _label(self, frame: dict) -> str:
        tool = frame.get("tool", "")
        if name := self.labels.get("names", {}).get(tool):
            return name
        for prefix, label in self.labels.get("prefixes", ()):
            if tool.startswith(prefix) and label:
                return label
        return frame.get("label") or tool

    def _reasoning(self, text: str) -> tuple[str, str]:
        self._line_open = not text.endswith("\n")
        return ("reasoning", text)

    def _tool_line(self, line: str) -> tuple[str, str]:
        if self._line_open:  # the model's reasoning or a sub-agent's text came before: a line of its own
            line = "\n" + line
        return self._reasoning(line)

    def _notice(self, text: str) -> tuple[str, str]:
        self.answer.paragraph_break()
        text = self.answer.piece(text)
        self.answer.paragraph_break()
        return ("content", text)

    def feed(self, frame: dict) -> list[tuple[str, str]]:
        kind = frame.get("type")
        if kind == "chunk":
            text = self.answer.chunk(frame["content"])
            return [("content", text)] if text else []
        if kind == "reasoning":
            return [self._reasoning(frame["content"])] if frame["content"] else []
        if kind == "tool_call":
            self.answer.paragraph_break()
            return [self._tool_line(TOOL_STARTS.format(tool=self._label(frame)))]
        if kind == "tool_chunk":
            if not frame["content"]:
                return []
            return [self._reasoning(frame["content"])]
        if kind == "tool_result":
            if frame.get("interrupted"):
                line = TOOL_CUT.format(tool=self._label(frame))
            elif frame.get("ok"):
                line = TOOL_OK.format(tool=self._label(frame))
            else:
                label, error = self._label(frame), frame.get("error") or _("失败")
                line = f"⚠️ {error}\n" if label in error else TOOL_FAILED.format(tool=label, error=error)
            return [self._tool_line(line)]
        if kind == "error":
            return [self._notice(NOTICE_ERROR.format(message=frame["message"]))]
        if kind in WAITING_FRAME_TYPES:
            self.ended = True
            expires = (frame.get("expires_at") or "")[:19].replace("T", " ") + " UTC"
            notice = NOTICE_APPROVAL if kind == "approval_required" else NOTICE_WAITING
            return [self._notice(notice.format(tool=self._label(frame), url=self.page_url, expires=expires))]
        if kind == "done":
            self.ended = True
            self.usage = frame.get("usage") or None
            self.finish_reason = finish_reason_of(frame)
            self.provider, self.model = frame.get("provider") or "", frame.get("model") or ""
            self.sources = frame.get("sources") or []
        return []  # session, ping, and frames this API has no use for


def finish_reason_of(done: dict) -> str:
    """The answer's `finish_reason` from the run's `done`: the model's own reason when it cut the
    answer (`length`, `content_filter`), `length` for any other cut reply (stopped, failed, out of
    time: what was sent is not the whole answer), else `stop`."""
    if not done.get("interrupted"):
        return "stop"
    reason = done.get("interrupted_reason")
    return reason if reason in CUT_REASONS else "length"


def usage_of(usage: dict | None) -> dict:
    """The usage object of the answer (zeros when the model reported none: a keyword-routed one)."""
    if not usage:
        return {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    return usage


def _dumps(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class ChunkEncoder:
    """`chat.completion.chunk` SSE frames of one answer; the envelope is written once and the
    delta put inside it (a chunk per frame is the hot path of the stream)."""

    def __init__(self, *, completion_id: str, created: int, model: str):
        head = _dumps({"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model})
        self._head = "data: " + head[:-1] + ',"choices":[{"index":0,"delta":'
        self._usage_head = "data: " + head[:-1] + ',"choices":[],"usage":'

    def role(self) -> str:
        return self._head + '{"role":"assistant","content":""},"finish_reason":null}]}\n\n'

    def piece(self, kind: str, text: str) -> str:
        name = "content" if kind == "content" else "reasoning_content"
        return f'{self._head}{{"{name}":{_dumps(text)}}},"finish_reason":null}}]}}\n\n'

    def finish(self, reason: str, *, aigc: dict, sources: list) -> str:
        """The last chunk of the choice, with the answer's implicit label beside `choices` (an
        extra field: the SDK keeps it, `chunk.model_extra["aigc"]`), and the knowledge passages it
        read when it read any (`model_extra["sources"]`)."""
        extra = f',"{SOURCES_KEY}":{_dumps(sources)}' if sources else ""
        return f'{self._head}{{}},"finish_reason":"{reason}"}}],"{AIGC_KEY}":{_dumps(aigc)}{extra}}}\n\n'

    def usage(self, usage: dict | None) -> str:
        return f"{self._usage_head}{_dumps(usage_of(usage))}}}\n\n"


DONE_FRAME = "data: [DONE]\n\n"


def completion_body(*, completion_id: str, created: int, model: str, content: str, reasoning: str,
                    finish_reason: str, usage: dict | None, conversation_id: str, aigc: dict,
                    sources: list) -> dict:
    """One `chat.completion` (non-stream)."""
    message = {"role": "assistant", "content": content}
    if reasoning:
        message["reasoning_content"] = reasoning
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}],
        "usage": usage_of(usage),
        "conversation_id": conversation_id,  # an extra field: the SDK keeps it (model_extra)
        AIGC_KEY: aigc,  # the answer's implicit label (safety_app.labels), likewise
        **({SOURCES_KEY: sources} if sources else {}),  # the knowledge passages it read, likewise
    }
