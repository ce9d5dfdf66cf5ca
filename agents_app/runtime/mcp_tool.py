"""One tool of an MCP service, offered to the model as `<service>__<tool>`.

The MCP side (sessions, tool lists, the call and its failure texts) is agents_app/mcp/; this
adapter gives it the tool interface (tool.py) behind the service's circuit breaker
(campus_agent/base/circuit.py): while it is open the tool is still offered, its description says it
is unavailable, and a call fails at once instead of waiting for the timeout.
"""
from __future__ import annotations

import json
from contextlib import nullcontext

from agents_app.mcp.notifications import elicitation_defaults
from agents_app.mcp.person import MAX_QUESTION_MESSAGE, TurnPerson, person_now, person_use
from agents_app.mcp.pool import McpUnavailable
from agents_app.mcp.tools import (
    CIRCUIT_OPEN_TEXT,
    PROBE_LEASE_MARGIN_SEC,
    McpToolInfo,
    mcp_circuit_key,
    mcp_failure_notice,
    mcp_failure_reason,
    mcp_service_tool_infos,
    mcp_tool_call,
)
from agents_app.models import McpService
from agents_app.runtime.context import RunContext
from agents_app.runtime.tool import AuthorizationNeeded, ElicitationNeeded, Emit, ToolOutcome
from agents_app.runtime.tool_names import mcp_tool_name
from campus_agent.base.circuit import (
    CIRCUIT_OPEN_DESCRIPTION,
    acircuit_enter,
    acircuit_failure,
    acircuit_success,
    circuit_release,
)
from campus_agent.base.request_id import request_id_set
from campus_agent.base.text import text_clean

EMPTY_PARAMETERS = {"type": "object", "properties": {}}


def parameters_normalise(schema) -> dict:
    """An MCP `inputSchema` when it is an object schema, else an empty object schema."""
    if isinstance(schema, dict) and schema.get("type") == "object":
        normalised = dict(schema)
        normalised.setdefault("properties", {})
        return normalised
    return dict(EMPTY_PARAMETERS)


class McpTool:
    answers_in_prose = False  # it returns data (a time, a list) for the model to phrase
    trace_kind = "mcp"  # campus.tool.kind on its span (runtime/tracing.py)

    def __init__(self, *, service: McpService, info: McpToolInfo, name: str | None = None,
                 unavailable: bool = False):
        self.service = service
        self.remote_name = info.name
        # `name`: the one the turn's assembly made unique; alone, the tool names itself.
        self.name = name or mcp_tool_name(service=service.name, tool=info.name)
        # `unavailable`: its service's breaker was open when the turn's tools were assembled.
        self.description = (CIRCUIT_OPEN_DESCRIPTION if unavailable else "") + info.description
        self.parameters = parameters_normalise(info.input_schema)
        # What the page calls it when staff gave the service no display name: the tool's title.
        self.label = None if service.display_name.strip() else info.title
        self.approval = service.tool_approval(tool=info.name, read_only=info.read_only, destructive=info.destructive)

    @property
    def circuit_key(self) -> str:
        return mcp_circuit_key(self.service)

    @property
    def keyword_text(self) -> str:
        return self.name  # campus-calendar__current_time → campus, calendar, current, time

    def fallback_args(self, question: str) -> dict | None:
        # Called with no arguments, so only when none is required: any value would be a guess,
        # and the question is not an argument (even one named `message`).
        return None if self.parameters.get("required") else {}

    async def run(self, args: dict, ctx: RunContext, emit: Emit) -> ToolOutcome:
        request_id_set(ctx.request_id)  # a task does not see the request's ContextVar value
        ticket = await acircuit_enter(source=self.circuit_key, name=f"MCP service {self.service.name}",
                                      lease_sec=self.service.timeout_sec + PROBE_LEASE_MARGIN_SEC)
        if ticket is None:
            text = CIRCUIT_OPEN_TEXT.format(service=self.service.label)
            return ToolOutcome(text=text, ok=False, error=text, label=self.label)
        # What the server asks the student (an elicitation) waits for the student, unless whoever
        # makes the call answers itself (the conformance client's person).
        person = TurnPerson(ctx.elicitation_answers) if person_now() is None else None
        try:
            # The server's progress notifications stream to the chip as tool_chunk lines.
            with person_use(person) if person is not None else nullcontext():
                result = await mcp_tool_call(service=self.service, tool=self.remote_name, args=args,
                                             shown_as=self.name, emit=emit, user_id=ctx.user_id)
        except BaseException:
            # Cancelled (a stop, the turn's budget): nothing learnt about the service. A plain
            # cache call, not awaited: an await here could be cancelled again.
            circuit_release(ticket)
            raise
        if result.source_failed:
            await acircuit_failure(ticket, reason=result.text)
        else:
            await acircuit_success(ticket)
        needed = AuthorizationNeeded(service_id=self.service.pk, service=self.service.label, url=result.authorization_url) \
            if result.authorization_url else None
        asked = person.asked if person is not None else None
        return ToolOutcome(text=result.text, ok=result.ok, error=result.error, links=result.links,
                           images=result.images, label=self.label, authorization=needed,
                           elicitation=self._question(asked) if asked is not None else None)

    def _question(self, params) -> ElicitationNeeded:
        mode = "url" if getattr(params, "mode", None) == "url" else "form"
        # The server's text, made valid once (no lone surrogate, no NUL): it is stored and shown.
        schema = json.loads(text_clean(json.dumps(getattr(params, "requested_schema", None) or {},
                                                  ensure_ascii=False))) if mode == "form" else {}
        return ElicitationNeeded(
            service=self.service.label, message=str(getattr(params, "message", ""))[:MAX_QUESTION_MESSAGE], mode=mode,
            schema=schema, defaults=elicitation_defaults(schema), url=getattr(params, "url", "") if mode == "url" else "",
        )


CONNECT_TOOL = "connect_account"
CONNECT_DESCRIPTION = (
    "“{service}”要用学生本人的账号授权后才能查询（例如学生自己的借阅、成绩、课表等个人数据），"
    "这位学生还没有连接。学生问到与“{service}”有关的内容时调用它：学生连接账号后，"
    "“{service}”的工具就可以用了。"
)
CONNECTED_TEXT = "学生已连接“{service}”账号。它的工具：{tools}。请调用合适的工具回答学生的问题。"


class McpConnectTool:
    """Offered instead of a per-student service's tools when the student has not authorized it
    and no list of its tools is at hand (agents_app/mcp/oauth.py): without a session of theirs
    its tools cannot be listed. Calling it opens their session, which makes the turn wait for
    their authorization (the result carries the page); once they authorized, the resumed turn
    lists the real tools and the model calls them."""

    answers_in_prose = False
    trace_kind = "mcp"
    approval = "auto"
    label = None
    parameters = EMPTY_PARAMETERS

    def __init__(self, *, service: McpService, name: str | None = None):
        self.service = service
        self.name = name or mcp_tool_name(service=service.name, tool=CONNECT_TOOL)
        self.description = CONNECT_DESCRIPTION.format(service=service.label)

    @property
    def keyword_text(self) -> str:
        return f"{self.service.name} {self.service.label}"

    def fallback_args(self, question: str) -> dict | None:
        return {}

    async def run(self, args: dict, ctx: RunContext, emit: Emit) -> ToolOutcome:
        request_id_set(ctx.request_id)
        try:
            infos = await mcp_service_tool_infos(service=self.service, user_id=ctx.user_id)
        except McpUnavailable as exc:
            notice = mcp_failure_notice(service=self.service, exc=exc)
            needed = AuthorizationNeeded(service_id=self.service.pk, service=self.service.label,
                                         url=exc.authorization_url) if exc.authorization_url else None
            return ToolOutcome(text=mcp_failure_reason(exc), ok=False, error=notice, authorization=needed)
        tools = "、".join(mcp_tool_name(service=self.service.name, tool=info.name) for info in infos) or "（没有）"
        return ToolOutcome(text=CONNECTED_TEXT.format(service=self.service.label, tools=tools))
