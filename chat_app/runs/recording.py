"""What a turn produced, gathered from its events, as the message rows to store (docs/design.md#the-chat-stream).

Pure bookkeeping with no database, so it can follow the stream event by event cheaply; the
rows are written once, at the end, by `chat_app.runs.recording.turn_store`.

A tool round is: the model's text (may be empty), its tool calls, their results. Text that
arrives after a round's results belongs to the next round or to the final reply. A thinking
model's reasoning goes the same way, into `meta.reasoning` of the round's assistant `tool_calls`
row or of the final reply, never into a row's content (docs/design.md#the-tool-loop).
"""
import dataclasses
import math
import uuid
from dataclasses import dataclass, field

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from agents_app.runtime.events import Chunk, Done, Error, Event, Moderation, Reasoning, ToolCall, ToolChunk, ToolResult
from campus_agent.base.text import text_clean
from chat_app.models import Conversation, Message
from chat_app.runs.quota import turn_usage_record

TOOL_CUT_MESSAGE = _("工具调用被中断，没有返回结果。")
# The largest count a usage column holds on every database (Message.prompt_tokens … are
# PositiveIntegerField: PostgreSQL's integer ends at 2**31 - 1). A model may report anything.
USAGE_COUNT_MAX = 2**31 - 1
_USAGE_KEYS_MAX = 32
_USAGE_KEY_CHARS = 64


@dataclass
class _Call:
    call: ToolCall
    result: ToolResult | None = None
    streamed: list[str] = field(default_factory=list)  # a sub-agent's live text (tool_chunk)


@dataclass
class _Round:
    text: str
    calls: list[_Call] = field(default_factory=list)
    reasoning: str = ""  # what a thinking model reasoned before asking for these calls
    # Resumed after an approval pause: its assistant `tool_calls` row was stored at the pause.
    head_stored: bool = False

    @property
    def has_results(self) -> bool:
        return any(c.result is not None for c in self.calls)


@dataclass(frozen=True)
class RowSpec:
    """One Message row to write (conversation, request id and order are added by the writer)."""

    role: str
    content: str
    meta: dict
    chart: dict | None = None
    is_final: bool = False


class TurnRecorder:
    def __init__(self) -> None:
        self._rounds: list[_Round] = []
        self._open: _Round | None = None
        self._text: list[str] = []
        self._reasoning: list[str] = []  # reasoning not yet part of a round: the final reply's
        self.done: Done | None = None
        self.errors: list[Error] = []
        self.moderation: dict[tuple[str, str, str], None] = {}  # (stage, action, category) hit, each once
        self.interrupted = False
        self._saw_text = False
        self._taken = 0  # rounds already handed out by finished_rounds_take (stored while running)
        self._last_taken = 0

    def add(self, event: Event) -> None:
        if isinstance(event, Chunk):
            self._saw_text = True
            if event.fallback and self._open is not None and self._open.calls:
                self._text.append(event.content)  # keyword routing: the tool's live text is the reply
                return
            if self._open is not None and self._open.has_results:
                self._close_round()
            if self._open is not None:
                self._open.text += event.content  # a model that talks after its call, same message
            else:
                self._text.append(event.content)
        elif isinstance(event, Reasoning):
            if self._open is not None and self._open.has_results:
                self._close_round()  # the next model request has begun
            if self._open is not None:
                self._open.reasoning += event.content
            else:
                self._reasoning.append(event.content)
        elif isinstance(event, ToolCall):
            if self._open is not None and self._open.has_results:
                self._close_round()
            if self._open is None:
                self._open = _Round(text="".join(self._text), reasoning="".join(self._reasoning))
                self._text, self._reasoning = [], []
            self._open.calls.append(_Call(call=event))
        elif isinstance(event, ToolResult):
            for record in self._all_calls():
                if record.call.call_id == event.call_id and record.result is None:
                    record.result = event
                    break
        elif isinstance(event, Done):
            # The figures the model reported, bounded before anything shows or stores them: a
            # count a column cannot hold made the whole finish fail (issue 20 point 3).
            self.done = dataclasses.replace(event, usage=usage_clean(event.usage)) if event.usage else event
            self.interrupted = self.interrupted or event.interrupted
        elif isinstance(event, Error):
            self.errors.append(event)
        elif isinstance(event, Moderation):
            self.moderation[(event.stage, event.action, event.category)] = None
        elif isinstance(event, ToolChunk):
            # Kept only for a call that gets no result (stopped, cut): its row keeps what the
            # student saw streamed; a finished call's result is its row.
            for record in self._all_calls():
                if record.call.call_id == event.call_id and record.result is None:
                    record.streamed.append(event.content)
                    break

    def resume_round(self, calls: list[ToolCall]) -> None:
        """A resumed run: `calls` waited for approval in a round stored at the pause; their
        results are this recorder's first rows."""
        self._open = _Round(text="", calls=[_Call(call=c) for c in calls], head_stored=True)

    def paused_rows(self) -> list[RowSpec]:
        """A run pausing for approval: the rows of every round not taken yet, the open round's
        tool rows only for the calls that have a result (the others wait). The recorder is done
        with then (a resumed run has its own); if the pause cannot be stored, `rows()` still
        holds everything."""
        specs: list[RowSpec] = []
        for rnd in self._all_rounds()[self._taken:]:
            specs.extend(_round_rows(rnd, finished_only=True))
        return specs

    def interrupt(self) -> None:
        self.interrupted = True

    @property
    def reply_text(self) -> str:
        """The final reply: the model text after the last tool round. (Done.full_text holds the text
        of every round; earlier rounds' text is stored on their `tool_calls` rows.) Only a turn
        that streamed no text at all takes Done.full_text."""
        if self._saw_text or self.done is None:
            return "".join(self._text)
        return self.done.full_text

    @property
    def full_text(self) -> str:
        """Every round's text and the reply's, as a turn's `Done.full_text` holds it: what the
        student was sent, for the `done` of a turn cut before the runtime's own Done."""
        if self.done is not None and not self._saw_text:
            return self.done.full_text
        return "".join(r.text for r in self._all_rounds() if not r.head_stored) + "".join(self._text)

    @property
    def tool_call_count(self) -> int:
        return sum(1 for _ in self._all_calls())

    def tools_called(self) -> tuple[list[str], list[str]]:
        """The names of the calls the turn made, in their order, and of those that failed (a
        result not ok, or none: the run ended without it)."""
        calls = list(self._all_calls())
        return ([record.call.tool for record in calls],
                [record.call.tool for record in calls if record.result is None or not record.result.ok])

    def calls_cut(self) -> list[ToolCall]:
        """The calls that started and have no result (the run ends without them)."""
        return [record.call for record in self._all_calls() if record.result is None]

    def _all_calls(self):
        for rnd in [*self._rounds, *([self._open] if self._open else [])]:
            yield from rnd.calls

    def _close_round(self) -> None:
        self._rounds.append(self._open)
        self._open = None

    def _all_rounds(self) -> list[_Round]:
        return [*self._rounds, *([self._open] if self._open else [])]

    def finished_rounds_take(self) -> list[RowSpec]:
        """The rows of the tool rounds that are complete (every call has its result) and were not
        taken yet; `rows()` leaves them out from then on. A run stores them as they finish, so
        a worker that dies loses no finished tool call (docs/design.md#runs)."""
        specs: list[RowSpec] = []
        taken = 0
        for rnd in self._all_rounds()[self._taken:]:
            if not rnd.calls or any(c.result is None for c in rnd.calls):
                break
            specs.extend(_round_rows(rnd))
            self._taken += 1
            taken += 1
        self._last_taken = taken
        return specs

    def finished_rounds_untake(self, specs: list[RowSpec]) -> None:
        """Gives back the rows of the last take, which could not be stored: `rows()` includes
        their rounds again."""
        self._taken -= self._last_taken
        self._last_taken = 0

    @property
    def unsaved_text(self) -> str:
        """The reply text streamed and not yet stored: what a checkpoint saves."""
        pending = "".join(rnd.text for rnd in self._all_rounds()[self._taken:])
        return pending + "".join(self._text)

    def reply_row(self, *, error: Error) -> RowSpec:
        """The reply alone, as text, for when `rows()` could not be stored: every text not stored
        yet (the rounds' and the final one), marked interrupted with `error`, nothing else that
        could fail again (no usage, chart or tool rows)."""
        meta = {"interrupted": True, "store_failed": True,
                "errors": [*({"code": e.code, "message": e.message} for e in self.errors),
                           {"code": error.code, "message": error.message}]}
        if self._reasoning:
            meta["reasoning"] = "".join(self._reasoning)
        return RowSpec(role="assistant", content=self.unsaved_text, meta=meta, is_final=True)

    def rows(self) -> list[RowSpec]:
        """Assistant `tool_calls` row + one tool row per call, per round not taken yet; then the final reply."""
        specs: list[RowSpec] = []
        for rnd in self._all_rounds()[self._taken:]:
            specs.extend(_round_rows(rnd))
        final_meta: dict = {}
        if self.done is not None and (usage := usage_clean(self.done.usage)):
            final_meta["usage"] = usage
        if self.interrupted:
            final_meta["interrupted"] = True
            if self.done is not None and self.done.interrupted_reason:  # the model cut it (events.CUT_REASONS)
                final_meta["interrupted_reason"] = self.done.interrupted_reason
        if self.done is not None and getattr(self.done, "fallback", False):
            final_meta["fallback"] = True  # answered by keyword routing, not by the model
        if self.done is not None and self.done.provider:  # per-provider usage: docs/runtime.md, "Providers"
            final_meta["provider"] = self.done.provider
            final_meta["model"] = self.done.model or ""
        if self.errors:
            final_meta["errors"] = [{"code": e.code, "message": e.message} for e in self.errors]
        if self._reasoning:
            final_meta["reasoning"] = "".join(self._reasoning)
        if self.done is not None and self.done.sources:  # the knowledge passages read: the footnotes after a reload
            final_meta["sources"] = self.done.sources
        if self.moderation:  # what the word lists did to the turn: the list's category, never the word
            final_meta["moderation"] = [{"stage": stage, "action": action, "category": category}
                                        for stage, action, category in self.moderation]
        chart = self.done.chart if self.done is not None else None
        specs.append(RowSpec(role="assistant", content=self.reply_text, meta=final_meta, chart=chart, is_final=True))
        return specs


def _token_count(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    if isinstance(value, float) and not math.isfinite(value):
        return 0
    return min(max(int(value), 0), USAGE_COUNT_MAX)


def _usage_value(value, depth: int):
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return _token_count(value) if isinstance(value, int) or math.isfinite(value) else None
    if isinstance(value, dict) and depth > 0:
        return usage_clean(value, depth=depth - 1) or None
    return None


def usage_clean(usage, *, depth: int = 1) -> dict:
    """A model's usage report as it is kept (meta.usage, the `done` frame): counts only, each an
    integer within 0..USAGE_COUNT_MAX (a float is truncated, a negative is 0), one level of nested
    details (`prompt_tokens_details`); anything else (text, lists, NaN, deeper nesting) and keys
    past the first 32 are left out."""
    if not isinstance(usage, dict):
        return {}
    kept: dict = {}
    for key, value in usage.items():
        if len(kept) >= _USAGE_KEYS_MAX:
            break
        if not isinstance(key, str) or not key or len(key) > _USAGE_KEY_CHARS:
            continue
        cleaned = _usage_value(value, depth)
        if cleaned is not None:
            kept[key] = cleaned
    return kept


def usage_columns(usage) -> dict[str, int]:
    """The summable usage columns of a row (Message.prompt_tokens …) from a turn's usage as the
    model reported it (Done.usage, stored in meta.usage): cached tokens are read from
    `prompt_tokens_details.cached_tokens` (OpenAI, DashScope) or a flat `cached_tokens`; a value
    missing or not a count is 0, one a column cannot hold is USAGE_COUNT_MAX."""
    usage = usage if isinstance(usage, dict) else {}
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else usage.get("cached_tokens")
    return {
        "prompt_tokens": _token_count(usage.get("prompt_tokens")),
        "completion_tokens": _token_count(usage.get("completion_tokens")),
        "cached_tokens": _token_count(cached),
    }


def _round_rows(rnd: _Round, *, finished_only: bool = False) -> list[RowSpec]:
    calls = [c for c in rnd.calls if c.result is not None] if finished_only else rnd.calls
    tool_rows = list(map(_tool_row, calls))
    if rnd.head_stored:
        return tool_rows
    tool_calls = [
        {"id": c.call.call_id, "type": "function", "function": {"name": c.call.tool, "arguments": c.call.args}}
        for c in rnd.calls
    ]
    meta = {"tool_calls": tool_calls, **({"reasoning": rnd.reasoning} if rnd.reasoning else {})}
    return [RowSpec(role="assistant", content=rnd.text, meta=meta), *tool_rows]


def _tool_row(record: _Call) -> RowSpec:
    meta = {"tool_call_id": record.call.call_id, "tool": record.call.tool}
    if record.result is None:
        meta.update(ok=False, interrupted=True)
        streamed = "".join(record.streamed)
        content = f"{streamed}\n\n（{TOOL_CUT_MESSAGE}）" if streamed else str(TOOL_CUT_MESSAGE)
        return RowSpec(role="tool", content=content, meta=meta)
    meta["ok"] = record.result.ok
    if record.result.error:
        meta["error"] = record.result.error
    # An MCP result's links, a trusted service's images and the tool's own title: the chip shows
    # them again after a reload (static/js/history.js).
    for extra in ("links", "images", "label"):
        if value := getattr(record.result, extra):
            meta[extra] = value
    return RowSpec(role="tool", content=record.result.content, meta=meta, chart=record.result.chart)


# --- turn_store ------------------------------------------------------------
# The rows writer: what a run produced, stored in one transaction (docs/design.md#data-model, #the-chat-stream).

@dataclass(frozen=True)
class TurnRows:
    """What one run produced, to store: its rows, the conversation they go to, the final row's id."""

    conversation_id: uuid.UUID
    final_message_id: uuid.UUID
    rows: list[RowSpec]
    agent_name: str
    request_id: str


def turn_store(
    *, conversation_id: uuid.UUID, final_message_id: uuid.UUID, rows: list[RowSpec], agent_name: str, request_id: str
) -> None:
    """Stores what a run produced in one transaction and touches the conversation (`turns_store`)."""
    turns_store([TurnRows(conversation_id=conversation_id, final_message_id=final_message_id, rows=rows,
                          agent_name=agent_name, request_id=request_id)])


def _messages(turn: TurnRows, now) -> list[Message]:
    return [
        Message(
            id=turn.final_message_id if spec.is_final else uuid.uuid4(),
            conversation_id=turn.conversation_id,
            role=spec.role,
            content=text_clean(spec.content),
            meta=text_clean(spec.meta),
            chart=text_clean(spec.chart),
            agent_name=turn.agent_name if spec.role == Message.Role.ASSISTANT else "",
            request_id=turn.request_id,
            seq=position,
            created_at=now,
            **usage_columns(spec.meta.get("usage")),
        )
        for position, spec in enumerate(turn.rows, start=1)
    ]


def turns_store(turns: list[TurnRows]) -> None:
    """Stores what several runs produced in one transaction, with one statement per kind (the
    conversations read, the rows inserted, the conversations touched) whatever their number.

    The rows share one timestamp and get increasing `seq` within their turn, so their order
    survives any clock. A turn's final assistant row takes its `final_message_id`, the id the
    stream announced up front. Their text is made valid here too (`text_clean`; the runtime's
    events already are): the model's and the sub-agents' output is not ours to refuse, and one
    lone surrogate or NUL that the database cannot hold would lose the whole reply. A turn whose
    conversation its owner deleted while the answer streamed has nothing to attach to: skipped.
    """
    now = timezone.now()
    built = [(turn, _messages(turn, now)) for turn in turns]
    # No savepoint when the caller's transaction is open (run_finish, run_rows_store): nothing
    # between them catches a failure, so it undoes the whole transaction either way, and a
    # savepoint is two more statements per store.
    with transaction.atomic(savepoint=False):
        conversations = {conversation.id: conversation for conversation in Conversation.objects.select_related("agent")
                         .filter(id__in={turn.conversation_id for turn in turns})}
        stored: list[Message] = []
        for turn, messages in built:
            conversation = conversations.get(turn.conversation_id)
            if conversation is None:
                continue
            for message, spec in zip(messages, turn.rows, strict=True):
                if spec.is_final:
                    turn_usage_record(conversation=conversation, final=message)
            stored += messages
        if not conversations:
            return
        Message.objects.bulk_create(stored)  # one batch, one instant (created_at=now)
        Conversation.objects.filter(id__in=list(conversations)).update(updated_at=now)
