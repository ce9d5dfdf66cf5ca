"""The campus agent as an MCP server (docs/design.md#other-clients): streamable HTTP at `/mcp`, for the editors
students work in (VS Code, Cursor, Claude Desktop). docs/clients.md, "MCP clients", is the user's
side of it.

- One tool per enabled agent, `ask_<slug>` (`-` → `_`), input `{"message", "conversation_id"}`;
  the answer as text plus `structuredContent` `{"answer", "conversation_id", "run_id"}` and its
  implicit label in `_meta` `{"aigc": …}` (safety_app.labels). A call is
  one turn run through chat_app.gateways.inbound: the same admission (limits, quota), stored rows and runs
  as the page's.
- Bearer auth (a personal API key or a JWT), checked here before the SDK sees the request; 401
  carries `WWW-Authenticate: Bearer resource_metadata=…` and that RFC 9728 document is served
  beside it (there is no OAuth server: keys come from the page's API-key panel).
- Stateless: every POST is answered on its own (a fresh SDK session manager per request, SSE
  responses so progress can stream), so any worker answers any request and nothing of a request
  outlives it. The run itself belongs to the server, as every run does (docs/design.md#runs).
- Progress notifications (when the client sent a progress token) say what the turn is doing.
- Cancelling: a 2025-era client POSTs `notifications/cancelled`, which stateless serving lands on
  another request (perhaps another worker) than the call: the call registers its run in the cache
  under (the caller's credential, the JSON-RPC id) and the notification stops that run. A call
  whose handler is cancelled (the 2026 wire's cancel: the client closed the response stream, or the
  client hung up) stops its run too: an MCP client has no way back in to it. Either way the reply so
  far is stored as interrupted.
"""
from __future__ import annotations

import asyncio
import hashlib
import io
import json
import re
import time
from dataclasses import dataclass, field

import anyio
import mcp_types as types
from django.conf import settings
from django.core.cache import cache
from django.core.handlers.asgi import ASGIRequest
from django.http.request import split_domain_port, validate_host
from django.utils.translation import gettext_lazy as _
from loguru import logger
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError

from agents_app.access import agents_for, audience_of
from agents_app.runtime.events import WAITING_FRAME_TYPES
from campus_agent.base import errors
from campus_agent.base.asyncdb import db_call
from campus_agent.base.redaction import clip_text
from campus_agent.base.request_id import request_id_from_header, request_id_set
from chat_app.accounts.authentication import Caller
from chat_app.gateways.answer_text import AnswerText
from chat_app.gateways.catalog import agent_catalogs, turn_tool_labels
from chat_app.gateways.inbound import InboundTurn, bearer_caller, inbound_turn_start
from chat_app.runs.chat_input import MESSAGE_MAX, chat_input_parse
from chat_app.runs.state import run_get
from safety_app.labels import AIGC_KEY, aigc_label

MCP_PATH = "/mcp"
METADATA_PATH = "/.well-known/oauth-protected-resource" + MCP_PATH
DOCS_PATH = "/docs/clients.md"  # what the metadata's resource_documentation points at
TOOL_PREFIX = "ask_"
SERVER_NAME = "campus-agent"
SCOPE_KEY = "campus_agent.mcp"  # what this module puts on the ASGI scope for the SDK's handlers
CANCEL_KEY_PREFIX = "mcp:call:"
CANCEL_KEY_MARGIN_SEC = 60

MSG_TOOL_UNKNOWN = "Unknown tool: {name}"
MSG_ARGUMENTS_UNKNOWN = _("不支持的参数：{names}（只接受 message 和 conversation_id）。")
MSG_ASK_FAILED = _("校园小智没能回答：{message}")
MSG_ASK_NOTICE = _("提示：{message}")
MSG_INTERRUPTED = _("回答被中断了。")
MSG_ORIGIN = "Origin not allowed"
MSG_NO_STREAM = "This server offers no standalone SSE stream (stateless): POST requests only"
MSG_TOOL_CALL = _("调用 {label}…")
MSG_TOOL_DONE = _("{label} 已完成")
MSG_TOOL_FAILED = _("{label} 失败：{error}")
MSG_TOOL_APPROVAL = _("{label} 需要批准：请在校园小智网页上批准或拒绝")
MSG_TOOL_WAITING = _("{label} 需要你先处理：请在校园小智网页上连接账号或回答服务提出的问题")
MSG_THINKING = _("思考中…")
MSG_WRITING = _("正在回答…（已写 {count} 字）")
SUMMARY_MAX_SERVICES = 6
# The agent as its prompt's first sentence says it, said of the agent ("你是…" → "它是…"): what the
# client's model reads to choose the tool (docs/clients.md, "The tools").
PROMPT_SUMMARY_MAX = 120
_SENTENCE_END = re.compile(r"(?<=[。！？!?])|(?<=\.)\s|\n")
_SECOND_PERSON = (("你是", "它是"), ("您是", "它是"), ("You are ", "It is "), ("you are ", "It is "))
GENERIC_ABOUT = "它用中文回答校园生活、课程、食堂、通知等问题。"

INPUT_SCHEMA = {
    "type": "object",
    "properties": {
        "message": {
            "type": "string", "minLength": 1, "maxLength": MESSAGE_MAX,
            "description": "要问的问题（1–8000 个字符）。",
        },
        "conversation_id": {
            "type": ["string", "null"], "format": "uuid",
            "description": "接着问：上一次回答的 conversation_id；留空（null）开始新的对话。",
        },
    },
    "required": ["message"],
    "additionalProperties": False,
}
OUTPUT_SCHEMA = {
    "type": "object",
    "properties": {
        "answer": {"type": "string", "description": "回答全文"},
        "conversation_id": {"type": "string", "format": "uuid", "description": "这次对话的 ID：传回它就能接着问"},
        "run_id": {"type": "string", "format": "uuid", "description": "这一轮运行的 ID（排查问题时用）"},
    },
    "required": ["answer", "conversation_id", "run_id"],
}
# An ask is stored (a conversation of the caller's) and reaches campus services; it deletes nothing.
ASK_ANNOTATIONS = types.ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=True)


@dataclass(frozen=True)
class McpRequest:
    """One HTTP request to /mcp, authenticated: put on the scope for the SDK's handlers."""

    caller: Caller
    credential: str  # SHA-256 of the bearer token: whose `notifications/cancelled` may stop whose call
    request_id: str
    origin: str = ""  # scheme://host the client reached us at: a knowledge source's link is absolute


@dataclass(frozen=True)
class AgentTool:
    name: str
    slug: str
    title: str
    description: str


def is_mcp_path(path: str) -> bool:
    return path in (MCP_PATH, MCP_PATH + "/", METADATA_PATH, DOCS_PATH)


def tool_name(*, slug: str) -> str:
    return TOOL_PREFIX + slug.replace("-", "_")


def prompt_summary(prompt: str) -> str:
    """The first sentence of an agent's prompt, on one line, at most PROMPT_SUMMARY_MAX characters,
    a second-person opening ("你是…", "You are …") said of the agent; "" for an empty prompt."""
    first = _SENTENCE_END.split((prompt or "").strip(), maxsplit=1)[0].strip()
    for mine, its in _SECOND_PERSON:
        if first.startswith(mine):
            first = its + first[len(mine):]
            break
    return clip_text(first, PROMPT_SUMMARY_MAX)


def _description(catalog: dict, *, summary: str = "") -> str:
    services = catalog.get("services", [])[:SUMMARY_MAX_SERVICES]
    parts = [f"向校园小智的「{catalog['name']}」提问。", summary or GENERIC_ABOUT]
    if services:
        listed = "、".join(f"{s['label']}（{s['summary']}）" if s["summary"] else s["label"] for s in services)
        parts.append(f"它能用：{listed}。")
    parts.append("传回上一次结果的 conversation_id 可以接着问。")
    return "".join(parts)


def agent_tools_read(*, user) -> list[AgentTool]:
    """The tools for the enabled agents `user`'s groups may use (agents_app.access), in the page's
    order. Two slugs that differ only by `-` and `_` would make one name: the first keeps it, the
    other is left out (and logged)."""
    audience = audience_of(user=user)
    agents = agents_for(audience=audience)
    prompts = {agent.slug: agent.system_prompt for agent in agents}
    catalogs = agent_catalogs(agents=agents, audience=audience)
    tools: dict[str, AgentTool] = {}
    for slug, catalog in catalogs.items():
        name = tool_name(slug=slug)
        if name in tools:
            logger.warning("MCP: agent {} left out, its tool name {} is taken by {}", slug, name, tools[name].slug)
            continue
        description = _description(catalog, summary=prompt_summary(prompts.get(slug, "")))
        tools[name] = AgentTool(name=name, slug=slug, title=catalog["name"], description=description)
    return list(tools.values())


def _call_context(name: str, user) -> tuple[AgentTool | None, dict]:
    # A tool of an agent the caller may not use is unknown, as one that does not exist.
    tool = next((t for t in agent_tools_read(user=user) if t.name == name), None)
    return tool, (turn_tool_labels() if tool is not None else {})


def _tool_label(labels: dict, frame: dict) -> str:
    tool = frame.get("tool", "")
    if label := labels.get("names", {}).get(tool):
        return label
    for prefix, label in labels.get("prefixes", []):
        if tool.startswith(prefix):
            return label
    return frame.get("label") or tool


def _cancel_key(credential: str, jsonrpc_id) -> str:
    # The id is the client's (any string or number, `1` is not `"1"`): hashed into a key of fixed length.
    digest = hashlib.sha256(f"{credential}:{json.dumps(jsonrpc_id)}".encode()).hexdigest()
    return CANCEL_KEY_PREFIX + digest


def _cancel_register(key: str, run_id: str) -> None:
    # As long as a call can last: its turn's budget, or a wait for a person's approval.
    ttl = max(settings.TURN_BUDGET_SEC, settings.APPROVAL_TIMEOUT_SEC) + CANCEL_KEY_MARGIN_SEC
    cache.set(key, run_id, timeout=int(ttl))


def _cancel_forget(key: str) -> None:
    cache.delete(key)


def _cancelled_run(key: str, user):
    run_id = cache.get(key)
    return run_get(user=user, run_id=run_id) if run_id else None


def _request_of(ctx) -> McpRequest:
    request = ctx.request
    mcp_request = request.scope.get(SCOPE_KEY) if request is not None else None
    if mcp_request is None:  # never: the ASGI app below authenticates every request first
        raise MCPError(code=types.INVALID_REQUEST, message="unauthenticated")
    return mcp_request


def _error_result(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=message)], is_error=True)


def _arguments_read(arguments: dict | None, slug: str):
    """The ChatInput of a call's arguments; raises ApiError 400 (the tool answers isError)."""
    arguments = dict(arguments or {})
    unknown = sorted(set(arguments) - {"message", "conversation_id"})
    if unknown:
        raise errors.invalid_body(MSG_ARGUMENTS_UNKNOWN.format(names="、".join(unknown)[:200]))
    if arguments.get("conversation_id") == "":
        arguments["conversation_id"] = None  # some clients send "" for an optional string left empty
    return chat_input_parse(body={**arguments, "agent": slug, "hint_domain": None})


class _Progress:
    """The call's progress notifications: one a tool, and while the answer streams one at most every
    MCP_PROGRESS_INTERVAL_SEC (a no-op when the client sent no progress token)."""

    def __init__(self, ctx) -> None:
        self.ctx = ctx
        self.count = 0
        self.text_at = 0.0
        self.thinking = False

    async def say(self, message: str) -> None:
        self.count += 1
        await self.ctx.session.report_progress(self.count, None, message)

    async def text(self, length: int) -> None:
        now = time.monotonic()
        if now - self.text_at >= settings.MCP_PROGRESS_INTERVAL_SEC:
            self.text_at = now
            await self.say(MSG_WRITING.format(count=length))


@dataclass
class _Outcome:
    answer: str = ""
    errors: list[str] = field(default_factory=list)  # the `error` frames' messages (for the student)
    interrupted: bool = False
    provider: str = ""  # who answered (the `done` frame's): the answer's implicit label names them
    model: str = ""
    sources: list[dict] = field(default_factory=list)  # the knowledge passages the answer read (`done`'s)

    @property
    def failed(self) -> bool:
        """The answer was cut (a failure, a stop, the turn's time ran out), or nothing was answered
        for an error. An error the model got past (a sub-agent said 40102 and the model told the
        student to log in again) is a notice instead."""
        return self.interrupted or (bool(self.errors) and not self.answer.strip())

    @property
    def notices(self) -> list[str]:
        """What the caller is told beside the answer, once each."""
        messages = list(dict.fromkeys(self.errors))
        return messages or ([str(MSG_INTERRUPTED)] if self.interrupted else [])


async def _turn_follow(turn: InboundTurn, progress: _Progress, labels: dict) -> _Outcome:
    """Follows the run to its `done`, telling `progress` what it does."""
    outcome, answer = _Outcome(), AnswerText()  # a paragraph break around each tool call
    async for frame in turn.frames():
        kind = frame["type"]
        if kind == "chunk":
            answer.chunk(frame["content"])
            await progress.text(len(answer.text))
        elif kind == "reasoning" and not progress.thinking:
            progress.thinking = True
            await progress.say(str(MSG_THINKING))
        elif kind == "tool_call":
            answer.paragraph_break()
            await progress.say(MSG_TOOL_CALL.format(label=_tool_label(labels, frame)))
        elif kind == "tool_result" and not frame.get("interrupted"):
            label = _tool_label(labels, frame)
            if frame["ok"]:
                await progress.say(MSG_TOOL_DONE.format(label=label))
            else:
                await progress.say(MSG_TOOL_FAILED.format(label=label, error=frame.get("error") or ""))
        elif kind in WAITING_FRAME_TYPES:
            text = MSG_TOOL_APPROVAL if kind == "approval_required" else MSG_TOOL_WAITING
            await progress.say(text.format(label=_tool_label(labels, frame)))
        elif kind == "error":
            outcome.errors.append(frame["message"])
        elif kind == "done":
            answer.rest(frame["full_text"])
            outcome.answer = answer.text or frame["full_text"]
            outcome.interrupted = bool(frame.get("interrupted"))
            outcome.provider, outcome.model = frame.get("provider") or "", frame.get("model") or ""
            outcome.sources = frame.get("sources") or []
            return outcome
    outcome.answer = answer.text
    return outcome


async def _call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    mcp_request = _request_of(ctx)
    request_id_set(mcp_request.request_id)
    tool, labels = await db_call(_call_context, params.name, mcp_request.caller.user)
    if tool is None:
        raise MCPError(code=types.INVALID_PARAMS, message=MSG_TOOL_UNKNOWN.format(name=params.name[:128]))
    try:
        chat = _arguments_read(params.arguments, tool.slug)
        turn = await inbound_turn_start(caller=mcp_request.caller, chat=chat, request_id=mcp_request.request_id)
    except errors.ApiError as exc:  # 400 arguments, 404 conversation, 429 limits and quota
        return _error_result(exc.message)
    key = _cancel_key(mcp_request.credential, ctx.request_id)
    try:
        await db_call(_cancel_register, key, turn.run_id)
        outcome = await _turn_follow(turn, _Progress(ctx), labels)
    except BaseException:
        # Cancelled (notifications/cancelled reached this connection, the response stream closed,
        # the client left): nobody can come back for this answer over MCP, so the run stops.
        with anyio.CancelScope(shield=True):
            await turn.stop("client_gone")
        raise
    finally:
        with anyio.CancelScope(shield=True):
            await db_call(_cancel_forget, key)
    structured = {"answer": outcome.answer, "conversation_id": turn.conversation_id, "run_id": turn.run_id}
    content = [types.TextContent(text=outcome.answer)] if outcome.answer else []
    template = MSG_ASK_FAILED if outcome.failed else MSG_ASK_NOTICE
    content += [types.TextContent(text=template.format(message=message)) for message in outcome.notices]
    # The knowledge passages the answer read, as MCP's own links to their documents (docs/clients.md).
    content += [types.ResourceLink(uri=mcp_request.origin + source["url"], name=_source_name(source),
                                   mime_type="application/pdf" if source["page"] else None)
                for source in outcome.sources]
    # The answer's implicit label (safety_app.labels) in the result's `_meta`, when there is an answer.
    meta = ({AIGC_KEY: aigc_label(produce_id=turn.message_id, provider=outcome.provider, model=outcome.model)}
            if outcome.answer else None)
    return types.CallToolResult(content=content, structured_content=structured, is_error=outcome.failed, meta=meta)


def _source_name(source: dict) -> str:
    """`[1] 转专业管理规定 p.2 · 第二章 › 第四条`: the passage's number, document, page, heading."""
    where = f"{source['title']} p.{source['page']}" if source.get("page") else source["title"]
    return f"[{source['n']}] {where}" + (f" · {source['heading']}" if source.get("heading") else "")


async def _list_tools(ctx, params) -> types.ListToolsResult:
    mcp_request = _request_of(ctx)
    tools = await db_call(agent_tools_read, user=mcp_request.caller.user)
    return types.ListToolsResult(tools=[
        types.Tool(
            name=tool.name, title=tool.title, description=tool.description,
            input_schema=INPUT_SCHEMA, output_schema=OUTPUT_SCHEMA, annotations=ASK_ANNOTATIONS,
        )
        for tool in tools
    ])


_stopping: set[asyncio.Task] = set()


async def _stop_cancelled(mcp_request: McpRequest, jsonrpc_id) -> None:
    key = _cancel_key(mcp_request.credential, jsonrpc_id)
    run = await db_call(_cancelled_run, key, mcp_request.caller.user)
    if run is not None:
        logger.debug("MCP: notifications/cancelled for {} stops run {}", jsonrpc_id, run.id)
        await InboundTurn(run=run).stop("cancelled")


class _CancelledElsewhere:
    """Server middleware: a `notifications/cancelled` naming a call of the same credential stops its
    run, wherever it runs. The stop is a task of its own: the notification's request (answered 202)
    ends, and its stateless session with it, before the stop is done."""

    async def __call__(self, ctx, call_next):
        if ctx.method == "notifications/cancelled" and ctx.request_id is None and ctx.request is not None:
            mcp_request = ctx.request.scope.get(SCOPE_KEY)
            jsonrpc_id = (ctx.params or {}).get("requestId")
            if mcp_request is not None and isinstance(jsonrpc_id, (str, int)) and not isinstance(jsonrpc_id, bool):
                task = asyncio.get_running_loop().create_task(_stop_cancelled(mcp_request, jsonrpc_id))
                _stopping.add(task)
                task.add_done_callback(_stopping.discard)
        return await call_next(ctx)


def _server_build() -> Server:
    server = Server(
        SERVER_NAME, version="1", title="校园小智",
        instructions="校园小智：每个工具是一个智能体，用中文提问，回答里带 conversation_id，传回它可以接着问。",
        on_list_tools=_list_tools, on_call_tool=_call_tool,
    )
    server.middleware.append(_CancelledElsewhere())
    return server


mcp_server = _server_build()


# --- the ASGI side: host and origin, auth, the metadata document, the SDK -------------------------

def _header(scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value.decode("latin-1")
    return None


def _site(scope) -> str:
    if settings.MCP_RESOURCE_URL:
        return settings.MCP_RESOURCE_URL.rstrip("/").removesuffix(MCP_PATH)
    return f"{scope.get('scheme', 'http')}://{_header(scope, b'host') or 'localhost'}"


def _host_allowed(host: str | None) -> bool:
    domain, _ = split_domain_port(host or "")
    return bool(domain) and validate_host(domain, settings.ALLOWED_HOSTS)


def metadata_document(scope) -> dict:
    """RFC 9728 protected-resource metadata of /mcp. `authorization_servers` is empty: there is no
    OAuth server to send a client to; a key is made on the page (API-key panel) and configured in
    the client as a Bearer header (docs/clients.md)."""
    site = _site(scope)
    return {
        "resource": site + MCP_PATH,
        "authorization_servers": [],
        "bearer_methods_supported": ["header"],
        "resource_name": "校园小智 MCP",
        "resource_documentation": settings.MCP_DOCUMENTATION_URL or f"{site}{DOCS_PATH}#mcp-clients",
    }


async def _json(send, status: int, body: dict, headers: list[tuple[bytes, bytes]] = ()) -> None:
    payload = json.dumps(body, ensure_ascii=False, default=str).encode()  # default: a lazy translated message
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json; charset=utf-8"), (b"content-length", str(len(payload)).encode()),
        *headers,
    ]})
    await send({"type": "http.response.body", "body": payload})


async def _docs(send) -> None:
    """docs/clients.md as it is in the deployed tree: the instructions the 401's metadata links to."""
    try:
        body = (settings.BASE_DIR / "docs" / "clients.md").read_bytes()
    except OSError:
        await _json(send, 404, {"code": errors.NOT_FOUND, "message": errors.MSG_NO_SUCH_RESOURCE})
        return
    await send({"type": "http.response.start", "status": 200, "headers": [
        (b"content-type", b"text/markdown; charset=utf-8"), (b"content-length", str(len(body)).encode()),
    ]})
    await send({"type": "http.response.body", "body": body})


def _jsonrpc_error(code: int, message: str) -> dict:
    return {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}


def _token(scope) -> str | None:
    header = _header(scope, b"authorization")
    if header is None:
        return None
    scheme, _, token = header.strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


async def _unauthorized(scope, send, exc: errors.ApiError, token_sent: bool) -> None:
    challenge = f'Bearer resource_metadata="{_site(scope)}{METADATA_PATH}"'
    if token_sent:
        challenge += ', error="invalid_token"'
    await _json(send, 401, {"code": exc.code, "message": exc.message},
                [(b"www-authenticate", challenge.encode("latin-1"))])


async def mcp_app(scope, receive, send) -> None:
    """ASGI app for /mcp and its metadata document (campus_agent.asgi mounts it beside Django)."""
    request_id = request_id_from_header(_header(scope, b"x-request-id"))
    request_id_set(request_id)

    async def send_with_id(message) -> None:
        if message["type"] == "http.response.start":
            # X-Accel-Buffering: nginx passes a call's progress on as it comes (docs/clients.md).
            extra = [(b"x-request-id", request_id.encode()), (b"x-accel-buffering", b"no")]
            message = {**message, "headers": [*message.get("headers", []), *extra]}
        await send(message)

    if scope["path"] in (METADATA_PATH, DOCS_PATH):
        if scope["method"] not in ("GET", "HEAD"):
            await _json(send_with_id, 405, {"code": errors.METHOD_NOT_ALLOWED, "message": errors.MSG_METHOD},
                        [(b"allow", b"GET, HEAD")])
        elif scope["path"] == DOCS_PATH:
            await _docs(send_with_id)
        else:
            await _json(send_with_id, 200, metadata_document(scope), [(b"access-control-allow-origin", b"*")])
        return
    # The Host was checked in front of every app (campus_agent/intake.py); the Origin is this server's own check.
    origin = _header(scope, b"origin")
    if origin is not None and not _host_allowed(origin.partition("://")[2].split("/")[0]):
        # DNS rebinding: a page elsewhere must not reach a server on the student's machine.
        await _json(send_with_id, 403, _jsonrpc_error(types.INVALID_REQUEST, MSG_ORIGIN))
        return
    token = _token(scope)
    try:
        caller = await bearer_caller(token)
    except errors.ApiError as exc:
        await _unauthorized(scope, send_with_id, exc, token_sent=bool(token))
        return
    if scope["method"] == "GET":
        # The standalone SSE stream carries server-initiated messages; stateless serving sends none
        # (no list_changed, no requests), so the spec's other answer: 405. Held open, it would only
        # tie up a connection per client.
        await _json(send_with_id, 405, _jsonrpc_error(types.INVALID_REQUEST, MSG_NO_STREAM), [(b"allow", b"POST")])
        return
    credential = hashlib.sha256(token.encode()).hexdigest()
    origin = ASGIRequest(scope, io.BytesIO()).build_absolute_uri("/").rstrip("/")  # the Host was checked above
    scope = {**scope, SCOPE_KEY: McpRequest(caller=caller, credential=credential, request_id=request_id,
                                            origin=origin)}
    # A manager per request: stateless serving keeps nothing between requests, and one scoped to
    # its request needs no start-up hook (the project runs without an ASGI lifespan) and leaves
    # nothing behind when the request ends.
    manager = StreamableHTTPSessionManager(
        mcp_server, stateless=True, json_response=False, max_request_body_size=settings.MCP_MAX_BODY_BYTES
    )
    async with manager.run():
        await manager.handle_request(scope, receive, send_with_id)
