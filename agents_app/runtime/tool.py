"""The one tool interface the loop knows (docs/design.md#layout-and-layers, #the-tool-loop). MCP tools (mcp_tool.py) and sub-agents
(subagent_tool.py) implement it; nothing asks which kind a tool is.

    outcome = await tool.run(args, ctx, emit)     # ToolOutcome; `emit(text)` streams progress

A tool never raises for a failure the model should read (timeout, HTTP error, isError): it
returns `ToolOutcome(ok=False, text=…)`. If one raises anyway, tool_runs.py turns it into a result.

Optional: `trace_kind` (`"mcp"`, `"subagent"` …) names the kind on the tool's trace span
(`campus.tool.kind`, runtime/tracing.py); a tool without it is traced all the same.
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from agents_app.runtime.context import RunContext

Emit = Callable[[str], Awaitable[None]]
"""Streams a piece of progress text (a sub-agent's own answer) to the user while a tool runs."""


@dataclass(frozen=True, slots=True)
class AuthorizationNeeded:
    """Where (`url`) the student authorizes the MCP service `service_id` (`service`: its display
    name) with their own account."""

    service_id: int
    service: str
    url: str


@dataclass(frozen=True, slots=True)
class ElicitationNeeded:
    """The call's MCP server or A2A sub-agent (`service`: its display name) asked the student
    something (an MCP elicitation, agents_app/mcp/person.py TurnPerson; an A2A `input-required`): a form (`mode` "form": `message` and the
    JSON Schema `schema` of its fields, `defaults` what the form shows filled in, SEP-1034) or a
    page to visit (`mode` "url": `url`). `resume`: what the tool needs to go on once answered,
    handed back with the answer (an A2A sub-agent's task and context ids); not shown."""

    service: str
    message: str
    mode: str
    schema: dict
    defaults: dict
    url: str = ""
    resume: dict = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """What a tool run produced.

    `text` goes to the model as the tool message; `error` is the user-facing failure text
    (sent in the `tool_result` frame); `chart` is chart data a sub-agent returned; `code` is the
    contract error code of a failure (40102 / 50001 / 50003); the loop surfaces 40102 to the
    user as an `error` event, the others only as the failed tool result. `links` ({uri, name}),
    `images` ({src}: a data: URL) and `label` (a display name the page does not know) are for
    the page only (an MCP tool's resource links, a trusted service's images, the tool's title).
    """

    text: str
    ok: bool = True
    error: str | None = None
    chart: dict | None = None
    code: int | None = None
    links: list[dict] | None = None
    images: list[dict] | None = None
    label: str | None = None
    # Where a knowledge collection's passages come from ({n, document_id, title, page, heading,
    # url}), for the student's footnotes (runtime/knowledge_tool.py).
    sources: list[dict] | None = None
    # What the student reads when no model writes the answer (keyword routing shows it instead of
    # `text`, which is written for the model): a knowledge collection's passages.
    shown: str | None = None
    # The call needs the student's authorization of a per-student service first (the page to
    # visit, agents_app/mcp/oauth.py): the turn waits for it instead of taking this as its result.
    authorization: AuthorizationNeeded | None = None
    # The call's server asked the student something first (an elicitation): the turn waits for
    # their answer, then runs the call again, handing the answer to the same question.
    elicitation: ElicitationNeeded | None = None


class Tool(Protocol):
    name: str  # unique within one turn, `[a-z0-9_-]{1,64}` (tool_names.py)
    description: str  # what the model reads to decide when to call it
    parameters: dict  # JSON Schema of an object
    approval: str  # campus_agent.base.approval.ApprovalPolicy: "auto", or "ask" (a person decides first)

    async def run(self, args: dict, ctx: RunContext, emit: Emit) -> ToolOutcome: ...

    # What keyword routing (fallback.py) asks a tool when the model is down:
    keyword_text: str
    """Words naming its topic besides the description: a sub-agent's own name, an MCP tool's
    `<service>__<tool>`. Keywords are cut from both."""

    answers_in_prose: bool
    """Its result reads as an answer to the student (a sub-agent), not as raw data (an MCP tool):
    preferred on a tie and listed first among the capabilities."""

    def fallback_args(self, question: str) -> dict | None:
        """The arguments to call it with when all there is is the student's question, or None
        when it needs something that would have to be guessed."""
        ...


def tool_spec(tool: Tool) -> dict:
    """The OpenAI `tools` entry of a tool."""
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
    }
