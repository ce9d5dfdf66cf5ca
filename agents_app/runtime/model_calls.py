"""The tool calls of one streamed model answer: fragments merged by `index` (docs/design.md#the-tool-loop), then
each call made whole and valid before it reaches a tool or goes back to the model.

Nothing the model sends is trusted (issue 20): a call gets our own id (`call_<16 hex>`), used in
every event, stored row, approval and message sent back to the model, so the assistant
`tool_calls` ids and the tool messages' `tool_call_id`s pair the same way within the turn and in
every later turn's history (stored rows). The model's id is checked (a bad one makes a bad call)
and kept on the call (`model_id`) for the log only. A fragment whose `index`, `id`, `name`,
`function` or `arguments` has the wrong type, or an id no API would make (too long, a newline,
U+202E), makes its call a bad call: not run, the model told (BAD_CALL_TEXT). At most
MAX_TOOL_CALLS_PER_ROUND calls are kept (later ones are counted, not stored); a call's arguments
past MAX_TOOL_ARGS_BYTES stop being kept, and the call is not run."""
from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field

from django.utils.translation import gettext_lazy as _

from agents_app.runtime.caps import cap, utf8_size
from agents_app.runtime.tool_runs import ToolRequest
from campus_agent.base.text import text_clean

BAD_ARGUMENTS_NOTE = "注意：调用参数不是 JSON 对象，已按空参数 {} 调用。"
BAD_CALL_TEXT = "调用格式不正确（{reason}），这次调用没有执行。请按工具定义重新调用。"
BAD_CALL_NOTICE = _("AI 模型发出了一个格式不正确的工具调用，已忽略。")
ARGS_TOO_LONG_TEXT = "调用参数过长（{size} 字节，上限 {limit} 字节），这次调用没有执行。请缩短参数后重试。"
ARGS_TOO_LONG_NOTICE = _("AI 模型的工具调用参数过长，未执行。")
CALLS_DROPPED_NOTE = ("注意：这一轮你请求了 {asked} 个工具调用，只执行了前 {kept} 个，其余 {dropped} 个没有执行；"
                      "如果仍然需要，请减少调用数量后再调用。")
# The name a bad call is stored and sent back under when the model gave no usable name.
BAD_CALL_NAME = "invalid_tool_call"
# What an API's call id looks like (OpenAI `call_…`, DashScope, vLLM `chatcmpl-tool-…`, Mistral's
# 9 characters); anything else makes a bad call.
_MODEL_ID = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
_TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
# A call index past this is not a position in a list of calls.
_MAX_INDEX = 10_000


def call_id_new() -> str:
    return f"call_{uuid.uuid4().hex[:16]}"


@dataclass
class ModelCall:
    """One tool call as the model streamed it, merged by index. `id` is ours; `model_id` the
    model's own (None when it gave none), never sent anywhere."""

    id: str = field(default_factory=call_id_new)
    name: str = ""
    arguments: str = ""  # JSON text, as the model wrote it ("{}" when not an object)
    args: dict = field(default_factory=dict)
    args_ok: bool = True
    model_id: str | None = None
    problem: str | None = None  # why this is a bad call (not run)
    args_size: int = 0  # UTF-8 bytes of the arguments the model sent (kept or not)
    args_limit: int = 0  # set when args_size went past it: the arguments were not kept
    note: str = ""  # put before the result, for the model (CALLS_DROPPED_NOTE)
    _parts: list[str] = field(default_factory=list, repr=False)

    def bad(self, reason: str) -> None:
        self.problem = self.problem or reason

    def arguments_add(self, text: str, limit: int) -> None:
        self.args_size += utf8_size(text)
        if self.args_size > limit:
            self.args_limit, self._parts = limit, []  # not kept: the call will not run
        elif not self.args_limit:
            self._parts.append(text)

    def finish(self) -> None:
        if self.problem is not None or self.args_limit:
            self.arguments, self.args, self._parts = "{}", {}, []
            self.name = self.name if _TOOL_NAME.fullmatch(self.name) else BAD_CALL_NAME
            return
        # The model's text goes back to the model (and to the tool): make it valid once, here.
        self.name, self.arguments = text_clean(self.name), text_clean("".join(self._parts))
        self._parts = []
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
        """The call as the assistant message's `tool_calls[]` entry (sent back to the model)."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}

    def request(self) -> ToolRequest:
        if self.problem is not None:
            refused = (BAD_CALL_TEXT.format(reason=self.problem), BAD_CALL_NOTICE)
        elif self.args_limit:
            refused = (ARGS_TOO_LONG_TEXT.format(size=self.args_size, limit=self.args_limit), ARGS_TOO_LONG_NOTICE)
        else:
            refused = None
        notes = [n for n in (self.note, "" if self.args_ok else BAD_ARGUMENTS_NOTE) if n]
        return ToolRequest(call_id=self.id, tool=self.name, args=self.args, note="\n".join(notes), refused=refused)


class ModelCalls:
    """The calls of one model answer, merged fragment by fragment (`add`), then `finish()`.

    Holds at most MAX_TOOL_CALLS_PER_ROUND calls and MAX_TOOL_ARGS_BYTES of arguments each, so
    an answer with 20,000 calls or 10 MB of arguments costs no more memory than a normal one."""

    def __init__(self) -> None:
        self.max_calls = cap("MAX_TOOL_CALLS_PER_ROUND")
        self.max_args = cap("MAX_TOOL_ARGS_BYTES")
        self._calls: dict[object, ModelCall] = {}
        self.dropped = 0  # calls past max_calls (counted by their first fragment)
        self._unindexed = 0

    def __bool__(self) -> bool:
        return bool(self._calls) or bool(self.dropped)

    def add(self, fragment) -> None:
        """Merges one streamed `delta.tool_calls[]` fragment (any JSON value) into its call."""
        if not isinstance(fragment, dict):
            return
        index = fragment.get("index")
        problem = None
        if index is None:
            # No index (some servers): each fragment that names a function starts a call.
            key = ("unindexed", self._unindexed)
            self._unindexed += 1
        elif isinstance(index, int) and not isinstance(index, bool) and 0 <= index <= _MAX_INDEX:
            key = index
        else:
            key = ("bad", len(self._calls) + self.dropped)
            problem = "index 不是非负整数"
        call = self._calls.get(key)
        if call is None:
            if len(self._calls) >= self.max_calls:
                if _starts_call(fragment):
                    self.dropped += 1
                return
            call = self._calls[key] = ModelCall()
        if problem:
            call.bad(problem)
        self._merge(call, fragment)

    def _merge(self, call: ModelCall, fragment: dict) -> None:
        model_id = fragment.get("id")
        if model_id is not None and model_id != "":
            if not isinstance(model_id, str):
                call.bad("id 不是字符串")
            elif call.model_id is None and not call.problem:
                if _MODEL_ID.fullmatch(model_id):
                    call.model_id = model_id
                else:
                    call.bad("id 含有不允许的字符或过长")
        function = fragment.get("function")
        if function is None:
            return
        if not isinstance(function, dict):
            call.bad("function 不是对象")
            return
        name, arguments = function.get("name"), function.get("arguments")
        if name is not None and name != "":
            if not isinstance(name, str):
                call.bad("name 不是字符串")
            elif not call.name:
                call.name = name[:200]
                if not _TOOL_NAME.fullmatch(name):
                    call.bad("name 不是合法的工具名")
        if isinstance(arguments, dict):  # some servers send the object itself
            arguments = json.dumps(arguments, ensure_ascii=False)
        if arguments is not None and not isinstance(arguments, str):
            call.bad("arguments 不是字符串")
        elif arguments:
            call.arguments_add(arguments, self.max_args)

    def finish(self) -> list[ModelCall]:
        """The calls in index order (bad ones after), each finished; the last one carries the note
        about calls that were not kept."""
        calls = [self._calls[k] for k in sorted(k for k in self._calls if isinstance(k, int))]
        calls += [c for k, c in self._calls.items() if not isinstance(k, int)]
        kept = []
        for call in calls:
            if not call.name and call.problem is None:
                if call.args_size == 0 and call.model_id is None:
                    continue  # an empty fragment, not a call
                call.bad("缺少 name")
            call.finish()
            kept.append(call)
        if kept and self.dropped:
            kept[-1].note = CALLS_DROPPED_NOTE.format(asked=len(kept) + self.dropped, kept=len(kept),
                                                      dropped=self.dropped)
        return kept


def _starts_call(fragment: dict) -> bool:
    function = fragment.get("function")
    return bool(fragment.get("id")) or (isinstance(function, dict) and bool(function.get("name")))


# The dict-based names an older caller uses (insights_app.routing.ask): the same merger, kept in
# the dict it passes, so it gets the same checks and caps.
_MERGER_KEY = "__merger__"


def model_call_merge(calls: dict, fragment) -> None:
    """See ModelCalls.add()."""
    merger = calls.get(_MERGER_KEY)
    if merger is None:
        merger = calls[_MERGER_KEY] = ModelCalls()
    merger.add(fragment)


def model_calls_finish(calls: dict) -> list[ModelCall]:
    """See ModelCalls.finish(); raises ValueError for a bad call, as this caller has no model to tell
    (the routing check records the answer as malformed)."""
    merger = calls.get(_MERGER_KEY)
    finished = merger.finish() if merger is not None else []
    for call in finished:
        if call.problem is not None:
            raise ValueError(f"malformed tool call: {call.problem}")
    return finished
