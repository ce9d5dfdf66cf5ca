"""The tool calls of one streamed model answer: fragments merged by `index` (DESIGN §6), then
each call made whole and valid before it reaches a tool or goes back to the model."""
import json
import uuid
from dataclasses import dataclass, field

from agents_app.runtime.tool_runs import ToolRequest
from campus_agent.text import text_clean

BAD_ARGUMENTS_NOTE = "注意：调用参数不是 JSON 对象，已按空参数 {} 调用。"


@dataclass
class ModelCall:
    """One tool call as the model streamed it, merged by index."""

    id: str = ""
    name: str = ""
    arguments: str = ""  # JSON text, as the model wrote it ("{}" when not an object)
    args: dict = field(default_factory=dict)
    args_ok: bool = True

    def finish(self) -> None:
        # The model's text goes back to the model (and to the tool): make it valid once, here.
        self.id, self.name, self.arguments = text_clean(self.id), text_clean(self.name), text_clean(self.arguments)
        try:
            parsed = json.loads(self.arguments) if self.arguments.strip() else {}
        except (ValueError, RecursionError):
            parsed = None
        if isinstance(parsed, dict):
            self.args = text_clean(parsed)
            if self.args != parsed:  # escapes ("\ud800", "\u0000") that decode to invalid text
                self.arguments = json.dumps(self.args, ensure_ascii=False)
        else:
            self.args, self.args_ok, self.arguments = {}, False, "{}"
        if not self.arguments.strip():
            self.arguments = "{}"

    def message(self) -> dict:
        """The call as the assistant message's `tool_calls[]` entry."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}

    def request(self) -> ToolRequest:
        return ToolRequest(call_id=self.id, tool=self.name, args=self.args,
                           note="" if self.args_ok else BAD_ARGUMENTS_NOTE)


def model_call_merge(calls: dict[int, ModelCall], fragment: dict) -> None:
    """Merges one streamed `delta.tool_calls[]` fragment (a plain dict) into its call by index."""
    index = fragment.get("index")
    call = calls.setdefault(index if index is not None else len(calls), ModelCall())
    if fragment.get("id"):
        call.id = fragment["id"]
    function = fragment.get("function")
    if isinstance(function, dict):
        name, arguments = function.get("name"), function.get("arguments")
        if name and not call.name:
            call.name = name
        if arguments and isinstance(arguments, str):
            call.arguments += arguments


def model_calls_finish(fragments: dict[int, ModelCall]) -> list[ModelCall]:
    """The named calls in index order, each finished, with ids unique within the answer."""
    calls, seen = [], set()
    for index in sorted(fragments):
        call = fragments[index]
        if not call.name:
            continue
        if not call.id or call.id in seen:  # ids must pair each tool message with its call
            call.id = f"call_{uuid.uuid4().hex[:16]}"
        seen.add(call.id)
        call.finish()
        calls.append(call)
    return calls
