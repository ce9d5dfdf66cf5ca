"""Typed events of one chat turn. `frame()` gives the §4 payload; campus_agent.sse encodes it.

The runtime yields these; chat_app stores what they describe and streams their frames.
"""
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Chunk:
    """A delta of the model's own text (or, with `fallback`, of the keyword-routing answer)."""

    content: str
    fallback: bool = False  # written by keyword routing, not by the model (issue #6)

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

    def frame(self) -> dict:
        return {"type": "tool_call", "call_id": self.call_id, "tool": self.tool, "args": self.args}


@dataclass(frozen=True, slots=True)
class ToolChunk:
    """A sub-agent's own text, streamed live while the tool runs."""

    call_id: str
    tool: str
    content: str

    def frame(self) -> dict:
        return {"type": "tool_chunk", "call_id": self.call_id, "tool": self.tool, "content": self.content}


@dataclass(frozen=True, slots=True)
class ToolResult:
    """A tool ended. `content` is what the model is given (not sent in the frame)."""

    call_id: str
    tool: str
    ok: bool
    content: str
    error: str | None = None
    chart: dict | None = None

    def frame(self) -> dict:
        payload = {"type": "tool_result", "call_id": self.call_id, "tool": self.tool, "ok": self.ok}
        if self.error:
            payload["error"] = self.error
        return payload


@dataclass(frozen=True, slots=True)
class Error:
    code: int
    message: str

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

    def frame(self, *, message_id: str) -> dict:
        payload = {"type": "done", "full_text": self.full_text, "message_id": message_id, "chart": self.chart}
        if self.fallback:
            payload["fallback"] = True
        if self.interrupted:  # the page marks the reply as cut at once, not only after a reload
            payload["interrupted"] = True
        return payload


Event = Chunk | ToolCall | ToolChunk | ToolResult | Error | Done
