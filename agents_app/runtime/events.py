"""Typed events of one chat turn. `frame()` gives the §4 payload; campus_agent.sse encodes it.

The runtime yields these; chat_app stores what they describe and streams their frames, and the
tool loop builds the model's next request from them. Their text comes from outside (the model,
sub-agents, MCP servers), so each event makes its own text valid when it is built (`text_clean`:
no lone surrogate, no NUL): what the student is shown, what is stored and what the model is sent
back are then the same valid text, and none of those steps can fail on it.
"""
from dataclasses import dataclass, field
from typing import Any

from campus_agent.text import text_clean


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

    def __post_init__(self) -> None:
        _clean_fields(self, "content")

    def frame(self) -> dict:
        payload = {"type": "chunk", "content": self.content}
        if self.fallback:
            payload["fallback"] = True
        return payload


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool starts. Emitted once the model's streamed call is complete; the model text streamed
    earlier in the same round belongs to the assistant `tool_calls` message."""

    call_id: str
    tool: str
    args: str  # JSON text, as the model wrote it (normalised to "{}" when not an object)

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

    def __post_init__(self) -> None:
        _clean_fields(self, "content", "error", "chart")

    def frame(self) -> dict:
        payload = {"type": "tool_result", "call_id": self.call_id, "tool": self.tool, "ok": self.ok}
        if self.error:
            payload["error"] = self.error
        return payload


@dataclass(frozen=True, slots=True)
class Error:
    """A failure the student is told about (`message` is student-facing, like ToolResult.error)."""

    code: int
    message: str

    def __post_init__(self) -> None:
        _clean_fields(self, "message")

    def frame(self) -> dict:
        return {"type": "error", "code": self.code, "message": self.message}


@dataclass(frozen=True, slots=True)
class Done:
    """The turn ended. Always last. `interrupted` when a failure cut the answer."""

    full_text: str
    chart: dict | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    interrupted: bool = False
    fallback: bool = False  # the turn was answered by keyword routing (issue #6)

    def __post_init__(self) -> None:
        _clean_fields(self, "full_text", "chart", "usage")

    def frame(self, *, message_id: str) -> dict:
        payload = {"type": "done", "full_text": self.full_text, "message_id": message_id, "chart": self.chart}
        if self.fallback:
            payload["fallback"] = True
        if self.interrupted:  # the page marks the reply as cut at once, not only after a reload
            payload["interrupted"] = True
        return payload


Event = Chunk | ToolCall | ToolChunk | ToolResult | Error | Done
