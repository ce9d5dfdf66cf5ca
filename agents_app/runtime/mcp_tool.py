"""One tool of an MCP service, offered to the model as `<service>__<tool>`.

The MCP side (sessions, tool lists, the call and its failure texts) is agents_app/mcp/; this
adapter only gives it the tool interface (tool.py).
"""
from __future__ import annotations

from agents_app.mcp.tools import McpToolInfo, mcp_tool_call
from agents_app.models import McpService
from agents_app.runtime.context import RunContext
from agents_app.runtime.tool import Emit, ToolOutcome
from agents_app.runtime.tool_names import mcp_tool_name
from campus_agent.request_id import request_id_set

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

    def __init__(self, *, service: McpService, info: McpToolInfo, name: str | None = None):
        self.service = service
        self.remote_name = info.name
        # `name`: the one the turn's assembly made unique; alone, the tool names itself.
        self.name = name or mcp_tool_name(service=service.name, tool=info.name)
        self.description = info.description
        self.parameters = parameters_normalise(info.input_schema)

    @property
    def keyword_text(self) -> str:
        return self.name  # campus-calendar__current_time → campus, calendar, current, time

    def fallback_args(self, question: str) -> dict | None:
        # Called with no arguments, so only when none is required: any value would be a guess,
        # and the question is not an argument (even one named `message`).
        return None if self.parameters.get("required") else {}

    async def run(self, args: dict, ctx: RunContext, emit: Emit) -> ToolOutcome:
        request_id_set(ctx.request_id)  # a task does not see the request's ContextVar value
        result = await mcp_tool_call(service=self.service, tool=self.remote_name, args=args, shown_as=self.name)
        return ToolOutcome(text=result.text, ok=result.ok, error=result.error)
