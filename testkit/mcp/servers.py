"""MCP test servers written with the mcp SDK's own server API (mcp 2.x `MCPServer`).

One tool set, three transports:

- stdio: `python -m testkit.mcp.servers` (what a stdio McpService runs). When the
  environment names `MCP_TEST_SPAWN_LOG`, each process start appends its pid to that file, so
  a test can count how many servers were spawned.
- SSE and streamable-http: `serve_http(transport)` runs the same tools on a loopback port.

Tools: `add`, `echo`, `fail` (answers isError), `slow` (sleeps), `picture` (text + image
content), `env_keys` (which environment variables the server process got), `pid`, `workdir`
(the process's working directory and what it holds), `forecast` (an `outputSchema` and a
structuredContent that fits it), `forecast_broken` (the same `outputSchema`, a structuredContent
that breaks it), `handbook` (resource links: one https, one `javascript:`), `timetable` (its
annotations carry a `title`, TIMETABLE_TITLE, and readOnlyHint), `register_course` (annotations:
destructiveHint, title 选课: the approval tests), `request_info` (what the request carried for
tracing: its `_meta` and, over HTTP, its `X-Request-Id` and `traceparent` headers, as JSON),
`progress` (reports `steps` progress notifications, PROGRESS_MESSAGE, before it answers),
`server_log` (sends its `text` as a log message, `notifications/message`, at `level`),
`tools_change` (adds the tool ADDED_TOOL and announces the change: `notifications/tools/list_changed`
on a handshake-era session, a `subscriptions/listen` event on a 2026-07-28 one), `client_info`
(the client's `clientInfo` as the server saw it, as JSON), `confirm` (asks the user to confirm,
an elicitation, and says what the client answered), `enrol` (a form of every field kind, with
defaults: ENROL_MESSAGE; answers with what it got, as JSON), `confirm_twice` (two questions one
after the other) and `pay` (a URL-mode elicitation, PAY_URL). Every call of `enrol`,
`confirm_twice` and `pay` appends what the client answered to the server's `elicitations` (HTTP
transports: the test reads it in process).

`build_flood_server()` is a hostile server's list instead: thousands of tools, one description
and one input schema of megabytes.
"""
from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import warnings
from typing import Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import (
    CallToolResult,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitRequestURLParams,
    ImageContent,
    InputRequiredResult,
    ResourceLink,
    TextContent,
    ToolAnnotations,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from testkit.servers import ServedApp

SPAWN_LOG_ENV = "MCP_TEST_SPAWN_LOG"
# A 1×1 transparent PNG: the smallest real image a tool can return.
PIXEL_PNG_B64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
FORECAST = {"city": "北京", "high": 31, "low": 22, "summary": "多云"}
BROKEN_FORECAST = {"city": "北京", "high": "很热"}  # `high` not an integer, `low` missing
HANDBOOK_URL = "https://jwc.example.edu.cn/handbook.pdf"
HANDBOOK_NAME = "学生手册"
TIMETABLE_TITLE = "课表查询"
PROGRESS_MESSAGE = "正在查询第 {step} 项"
CONFIRM_MESSAGE = "确定要退选这门课吗？"
ADDED_TOOL = "added_later"


class Confirmation(BaseModel):
    confirmed: bool


ENROL_MESSAGE = "请填写选课信息"
PAY_MESSAGE = "请在缴费页面完成支付"
PAY_URL = "https://pay.example.edu.cn/order/42"


class Enrolment(BaseModel):
    email: str = Field(description="校园邮箱", json_schema_extra={"format": "email"})
    credits: int = Field(default=3, ge=1, le=6, description="学分")
    campus: Literal["东区", "西区"] = "西区"
    notify: bool = True
    note: str = ""


async def _ask(ctx: Context, key: str, params) -> tuple[str, dict | None] | InputRequiredResult:
    """One question in either era: (action, content) of the answer, or (2026-07-28, no answer in
    this round yet) the InputRequiredResult that asks it, its state naming the question."""
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        if params.mode == "url":
            answer = await ctx.elicit_url(params.message, params.url, key)
            return answer.action, None
        session = ctx.request_context.session
        answer = await session.elicit_form(params.message, params.requested_schema,
                                           related_request_id=ctx.request_id)
        return answer.action, answer.content
    responses = ctx.input_responses or {}
    if key in responses:
        return responses[key].action, responses[key].content
    return InputRequiredResult(input_requests={key: ElicitRequest(params=params)}, request_state=key)


def _form(message: str, model: type[BaseModel]) -> ElicitRequestFormParams:
    return ElicitRequestFormParams(message=message, requested_schema=model.model_json_schema())


class Forecast(TypedDict):
    city: str
    high: int
    low: int
    summary: str


def build_server(name: str = "campus-test", *, slow_cancelled: threading.Event | None = None,
                 elicitations: list | None = None, slow_started: threading.Event | None = None) -> MCPServer:
    """`slow_started` / `slow_cancelled` (in-process servers) are set when a `slow` call begins /
    is cancelled by its client;
    `elicitations` gets what the client answered each question of enrol, confirm_twice and pay."""
    server = MCPServer(name, log_level="WARNING")
    elicitations = elicitations if elicitations is not None else []

    @server.tool(description="把两个整数相加。Add two integers.")
    def add(a: int, b: int) -> int:
        return a + b

    @server.tool(description="原样返回文本。Echo the text back.")
    def echo(text: str) -> str:
        return text

    @server.tool(description="总是失败的工具（测试 isError）。")
    def fail(message: str = "故意失败") -> str:
        raise ToolError(message)

    @server.tool(description="等待若干秒后返回。")
    async def slow(seconds: float = 1.0) -> str:
        if slow_started is not None:
            slow_started.set()
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            if slow_cancelled is not None:
                slow_cancelled.set()
            raise
        return f"slept {seconds}"

    @server.tool(description="返回一段文字和一张图片。")
    def picture() -> list[TextContent | ImageContent]:
        return [
            TextContent(text="这是一张图"),
            ImageContent(data=PIXEL_PNG_B64, mime_type="image/png"),
        ]

    @server.tool(description="今天的天气预报（结构化结果）。")
    def forecast() -> Forecast:
        return Forecast(**FORECAST)

    @server.tool(description="天气预报，但结构化结果不符合声明的 outputSchema。")
    def forecast_broken() -> CallToolResult:
        return CallToolResult(content=[TextContent(text="北京 很热")], structured_content=BROKEN_FORECAST)

    # Advertise Forecast's schema for it without the server checking its own output (a server
    # written elsewhere may well send what its schema forbids).
    server._tool_manager.get_tool("forecast_broken").fn_metadata.output_schema = (
        server._tool_manager.get_tool("forecast").output_schema
    )

    @server.tool(description="学生手册的下载链接。")
    def handbook() -> list[TextContent | ResourceLink]:
        return [
            TextContent(text="手册见链接"),
            ResourceLink(uri=HANDBOOK_URL, name="handbook.pdf", title=HANDBOOK_NAME, mime_type="application/pdf"),
            ResourceLink(uri="javascript:alert(1)", name="恶意链接"),
        ]

    @server.tool(description="查询今天的课表。", annotations=ToolAnnotations(title=TIMETABLE_TITLE, read_only_hint=True))
    def timetable() -> str:
        return "今天没有课"

    @server.tool(description="为学生选一门课（会改变选课结果）。",
                 annotations=ToolAnnotations(title="选课", destructive_hint=True))
    def register_course(course: str) -> str:
        return f"已选上 {course}"

    @server.tool(description="这次请求带来的请求号和追踪上下文（测试用）。")
    def request_info(ctx: Context) -> str:
        request = ctx.request_context
        http = request.request  # the HTTP request that carried the message; None over stdio
        headers = getattr(http, "headers", None) or {}
        return json.dumps({
            "meta": dict(request.meta or {}),
            "protocol_version": request.protocol_version,
            "headers": {name: headers.get(name) for name in ("x-request-id", "traceparent")} if http else None,
        })

    @server.tool(description="分几步完成，每步报告进度。")
    async def progress(ctx: Context, steps: int = 3) -> str:
        for step in range(1, steps + 1):
            await ctx.report_progress(step, steps, PROGRESS_MESSAGE.format(step=step))
            await asyncio.sleep(0.05)
        return f"完成 {steps} 项"

    @server.tool(description="把一段文字写进服务器日志（发给客户端）。")
    async def server_log(ctx: Context, text: str, level: str = "info") -> str:
        with warnings.catch_warnings():  # the logging capability is deprecated as of 2026-07-28, not gone
            warnings.simplefilter("ignore")
            await ctx.log(level, text, logger_name="campus-test")
        return "logged"

    @server.tool(description="新增一个工具并通知客户端工具列表变了。")
    async def tools_change(ctx: Context) -> str:
        if server._tool_manager.get_tool(ADDED_TOOL) is None:
            server.add_tool(lambda: "我是后来加的", name=ADDED_TOOL, description="后来加上的工具。")
        await ctx.notify_tools_changed()  # 2026-07-28: the subscriptions/listen streams
        await ctx.request_context.session.send_tool_list_changed()  # handshake era (dropped on 2026-07-28)
        return "changed"

    @server.tool(description="请用户确认后再继续（elicitation）。")
    async def confirm(ctx: Context) -> str | InputRequiredResult:
        if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:  # the handshake era asks within the call
            answer = await ctx.elicit(CONFIRM_MESSAGE, Confirmation)
            return f"answer={answer.action}" + (f" confirmed={answer.data.confirmed}" if answer.action == "accept" else "")
        # 2026-07-28: no request to the client; the question is the result, the answer comes with
        # the client's retry, beside the state this round handed out (SEP-2322).
        if not ctx.input_responses:
            params = ElicitRequestFormParams(message=CONFIRM_MESSAGE,
                                             requested_schema=Confirmation.model_json_schema())
            return InputRequiredResult(input_requests={"confirm": ElicitRequest(params=params)},
                                       request_state="round-1")
        answer = ctx.input_responses["confirm"]
        confirmed = f" confirmed={answer.content['confirmed']}" if answer.action == "accept" else ""
        return f"answer={answer.action}{confirmed} state={ctx.request_state}"

    @server.tool(description="填写选课表单后选课（elicitation：各种字段）。")
    async def enrol(ctx: Context) -> str | InputRequiredResult:
        asked = await _ask(ctx, "enrol", _form(ENROL_MESSAGE, Enrolment))
        if isinstance(asked, InputRequiredResult):
            return asked
        elicitations.append({"tool": "enrol", "action": asked[0], "content": asked[1]})
        return json.dumps({"action": asked[0], "content": asked[1]}, ensure_ascii=False)

    @server.tool(description="连问两次确认（两个 elicitation）。")
    async def confirm_twice(ctx: Context) -> str | InputRequiredResult:
        # 2026-07-28: the first answer rides in the state of the round that asks the second.
        first = (ctx.request_state or "").removeprefix("second:") if (ctx.request_state or "").startswith("second:") \
            else None
        if first is None:
            asked = await _ask(ctx, "first", _form("第一次确认", Confirmation))
            if isinstance(asked, InputRequiredResult):
                return asked
            first = asked[0]
            if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
                return InputRequiredResult(input_requests={"second": ElicitRequest(params=_form("第二次确认", Confirmation))},
                                           request_state=f"second:{first}")
        asked = await _ask(ctx, "second", _form("第二次确认", Confirmation))
        if isinstance(asked, InputRequiredResult):
            return asked
        elicitations.append({"tool": "confirm_twice", "first": first, "second": asked[0]})
        return f"first={first} second={asked[0]}"

    @server.tool(description="去缴费页面付款（URL 模式的 elicitation）。")
    async def pay(ctx: Context) -> str | InputRequiredResult:
        asked = await _ask(ctx, "pay", ElicitRequestURLParams(message=PAY_MESSAGE, url=PAY_URL, elicitation_id="pay-42"))
        if isinstance(asked, InputRequiredResult):
            return asked
        elicitations.append({"tool": "pay", "action": asked[0]})
        return f"pay={asked[0]}"

    @server.tool(description="客户端报上的名字和版本。")
    def client_info(ctx: Context) -> str:
        params = ctx.request_context.session.client_params
        info = params.client_info if params else None
        return json.dumps({"name": info.name, "version": info.version} if info else None)

    @server.tool(description="列出服务器进程能看到的环境变量名。")
    def env_keys() -> str:
        return ",".join(sorted(os.environ))

    @server.tool(description="服务器进程号。")
    def pid() -> str:
        return str(os.getpid())

    @server.tool(description="服务器进程的工作目录及其中的文件名。")
    def workdir() -> str:
        cwd = os.getcwd()
        return json.dumps({"cwd": cwd, "entries": sorted(os.listdir(cwd))})

    return server


FLOOD_HUGE_DESCRIPTION = "huge_description"
FLOOD_HUGE_SCHEMA = "huge_schema"


def build_flood_server(*, count: int, huge_bytes: int) -> MCPServer:
    """A hostile server's tool list: `echo`, then FLOOD_HUGE_DESCRIPTION (its description
    `huge_bytes` long) and FLOOD_HUGE_SCHEMA (its input schema that long), then `count` tools
    `tool_00000` … . Each is `echo` under another name: copies of the one tool the SDK built, so
    ten thousand cost no time to make."""
    server = MCPServer("campus-flood", log_level="WARNING")

    @server.tool(description="原样返回文本。Echo the text back.")
    def echo(text: str) -> str:
        return text

    tools = server._tool_manager._tools
    tools[FLOOD_HUGE_DESCRIPTION] = tools["echo"].model_copy(
        update={"name": FLOOD_HUGE_DESCRIPTION, "description": "说明" * (huge_bytes // 6)})
    schema = {"type": "object", "properties": {"text": {"type": "string", "description": "x" * huge_bytes}}}
    tools[FLOOD_HUGE_SCHEMA] = tools["echo"].model_copy(update={"name": FLOOD_HUGE_SCHEMA, "parameters": schema})
    for i in range(count):
        tools[f"tool_{i:05d}"] = tools["echo"].model_copy(update={"name": f"tool_{i:05d}"})
    return server


def stdio_argv() -> list[str]:
    """The argv a stdio McpService config uses to run this server (no shell)."""
    return [sys.executable, "-m", "testkit.mcp.servers"]


class HttpMcpServer(ServedApp):
    """The tools over `sse` or `streamable-http` (or another server's: `mcp`); `url` is what an
    McpService config points at.

    `fail(status, methods=("tools/call",))` makes the server answer the JSON-RPC POSTs of those
    methods with that HTTP status (a plain-text body, as a proxy or a crashed server sends), the
    rest served as usual; `fail(None)` ends it. `failed` counts the answers so made."""

    lifespan = "on"  # the streamable-http session manager runs in the app's lifespan

    def __init__(self, transport: str, mcp: MCPServer | None = None):
        self.slow_started = threading.Event()  # a `slow` call reached the server and runs
        self.slow_cancelled = threading.Event()  # a `slow` call was cancelled by the gateway
        self.elicitations: list[dict] = []  # what the gateway answered enrol, confirm_twice and pay
        mcp = mcp or build_server(slow_cancelled=self.slow_cancelled, elicitations=self.elicitations,
                                  slow_started=self.slow_started)
        if transport == "sse":
            inner, self.path = mcp.sse_app(), "/sse"
        elif transport == "streamable-http":
            inner, self.path = mcp.streamable_http_app(), "/mcp"
        else:
            raise ValueError(transport)
        self.transport = transport
        self.fail_status: int | None = None
        self.fail_methods: tuple[str, ...] = ()
        self.failed = 0
        self._inner = inner

        async def app(scope, receive, send):  # a plain function: uvicorn reads it as ASGI 3
            return await self._failing(scope, receive, send)

        self.app = app

    def fail(self, status: int | None, *, methods: tuple[str, ...] = ("tools/call",)) -> HttpMcpServer:
        self.fail_status, self.fail_methods = status, methods
        return self

    async def _failing(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST" or self.fail_status is None:
            return await self._inner(scope, receive, send)
        chunks, more = [], True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        try:
            method = json.loads(body).get("method")
        except (ValueError, AttributeError):
            method = None
        if method in self.fail_methods:
            self.failed += 1
            headers = [(b"content-type", b"text/plain; charset=utf-8")]
            if self.fail_status == 429:
                headers.append((b"retry-after", b"1"))
            await send({"type": "http.response.start", "status": self.fail_status, "headers": headers})
            await send({"type": "http.response.body", "body": f"scripted HTTP {self.fail_status}".encode()})
            return None
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await self._inner(scope, replay, send)

    @property
    def url(self) -> str:
        return f"{self.root_url}{self.path}"


def serve_http(transport: str) -> HttpMcpServer:
    """Serve the tools over `sse` or `streamable-http` on a loopback port (OS-picked)."""
    return HttpMcpServer(transport).serve()


def main() -> None:
    log = os.environ.get(SPAWN_LOG_ENV)
    if log:
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(f"{os.getpid()}\n")
    build_server().run("stdio")


if __name__ == "__main__":
    main()
