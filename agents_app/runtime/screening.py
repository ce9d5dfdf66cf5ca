"""The moderation word lists applied to what a turn shows while it streams
(docs/design.md#content-safety-and-labels, docs/safety.md#the-answer-while-it-streams).

One `TurnScreens` per turn, built from the lists as they are at its start: a screen for the
model's answer, one for its reasoning, and one per tool call for the tool's own live text (a
sub-agent's `tool_chunk`), each holding back what could still become a listed word
(safety_app.screen). What they release is what the student is shown, what is stored and what
the model is sent back, so a masked word is masked in all three.

- A `block` word in the answer or the reasoning raises `ScreenBlocked`: the tool loop stops the
  model and ends the reply with a notice; the text held is kept for the audit only.
- A `block` word in a tool's text withholds the rest of that text; the call's result becomes a
  failure whose content (for the model and the stored row) and error (for the student) say only
  that it was left out. The turn goes on: the model answers without it.
- `mask` words are masked; each (stage, category) is told once per turn in a `moderation` frame.
- A moderation model that checks the answer or the reasoning (safety_app.model_check) holds what
  the lists released once more, a segment at a time (`gate`), and releases a segment only once
  the model passed it; a flagged one blocks as a `block` word does.
"""

import json
import re
from dataclasses import dataclass, field, replace

from django.utils.translation import gettext_lazy as _
from loguru import logger

from agents_app.runtime.context import RunContext
from agents_app.runtime.events import Chunk, Event, Moderation, Reasoning, ToolChunk, ToolResult
from campus_agent.base.asyncdb import db_call
from safety_app.lists_cache import Matchers, matchers_current
from safety_app.matcher import Hit, first_block, masked
from safety_app.model_check import MODEL_CATEGORY, config_verdict
from safety_app.screen import Screened, StreamScreen

ANSWER, REASONING = "answer", "reasoning"
# The moderation model reads the answer in segments: a sentence or more, once this much is held …
SEGMENT_MIN_CHARS = 20
SENTENCE_END = re.compile(r"[。！？!?；;\n]+")
# … and never more than this without asking; with the end of the segment before, for its sense.
SEGMENT_MAX_CHARS = 300
SEGMENT_CONTEXT_CHARS = 100
# The end of a reply the lists stopped: said in the student's language (the run activates it).
ANSWER_BLOCKED_TEXT = _("（回答中出现了不适合展示的内容，已停止生成。请换个问法。）")
# What a tool's result becomes when its text had a `block` word: the model reads the first, the
# student the second; neither holds the tool's words.
TOOL_TEXT_BLOCKED_FOR_MODEL = "工具返回的内容含有不适合展示的内容，已被内容安全策略略去。请不要复述，基于其他信息回答学生。"
TOOL_TEXT_BLOCKED_TEXT = _("工具返回的内容含有不适合展示的内容，已略去。")


class ScreenBlocked(Exception):
    """A `block` word in the model's answer or reasoning: the reply stops here."""

    def __init__(self, notice: Moderation):
        super().__init__(notice.category)
        self.notice = notice


@dataclass
class TurnScreens:
    matchers: Matchers | None
    _stages: dict[str, StreamScreen] = field(default_factory=dict)
    _tools: dict[str, StreamScreen] = field(default_factory=dict)
    _told: set[tuple[str, str]] = field(default_factory=set)  # (stage, category) of masks told
    _gates: dict[str, "_Segments"] = field(default_factory=dict)  # the moderation model's, by stage

    @property
    def active(self) -> bool:
        return self.matchers is not None and any(m.size for m in self.matchers.by_stage.values())

    def text(self, stage: str, piece: str) -> list[Event]:
        """A piece of the model's answer or reasoning: the events to show now (maybe none)."""
        if not self.active:
            return [_text_event(stage, piece)]
        return self._shown(stage, self._stage(stage).feed(piece))

    def text_end(self, stage: str) -> list[Event]:
        """The end of the stage's text in this round (the model's stream ended): what was held."""
        screen = self._stages.pop(stage, None)
        if screen is None:
            return []
        return self._shown(stage, screen.end())

    def tool_event(self, event: Event) -> list[Event]:
        """A tool's `ToolChunk` or `ToolResult` as the student may see it (other events as they are)."""
        if not self.active or not isinstance(event, ToolChunk | ToolResult):
            return [event]
        if isinstance(event, ToolChunk):
            screen = self._tools.setdefault(event.call_id, StreamScreen(self.matchers.by_stage[ANSWER]))
            return self._tool_shown(event, screen.feed(event.content))
        screen = self._tools.pop(event.call_id, None)
        events = self._tool_shown(event, screen.end()) if screen is not None else []
        return [*events, *self._result_screened(event, streamed=screen.blocked if screen is not None else None)]

    def gated(self, stage: str) -> bool:
        """Whether a moderation model checks the stage's text too (safety_app.model_check)."""
        return self.matchers is not None and self.matchers.models.get(stage) is not None

    async def gate(self, stage: str, events: list[Event], *, final: bool = False) -> list[Event]:
        """The text the word lists released, held again until a segment of it is complete (a
        sentence, or SEGMENT_MAX_CHARS) and the moderation model has passed it; the end of the
        round (`final`) checks the rest. A flagged segment raises ScreenBlocked, as a block word
        does; a failing model lets it through or blocks it as the model's fail mode says."""
        gate = self._gates.setdefault(stage, _Segments())
        passed: list[Event] = []
        for event in events:
            if isinstance(event, Chunk | Reasoning):
                gate.pending += event.content
            else:
                passed.append(event)  # a mask notice: it says nothing of the words
        config = self.matchers.models[stage]
        while segment := gate.take(final=final):  # a long piece is several segments
            verdict = await config_verdict(config, stage=stage, text=gate.context + segment)
            if verdict.flagged:
                logger.warning("moderation model: {} blocked category={}", stage, verdict.category)
                raise ScreenBlocked(Moderation(stage=stage, action="block", category=verdict.category or MODEL_CATEGORY,
                                               held=gate.pending_all(segment)))
            gate.context = segment[-SEGMENT_CONTEXT_CHARS:]
            passed.append(_text_event(stage, segment))
        if final:
            self._gates.pop(stage, None)
        return passed

    def call_args(self, call) -> list[Event]:
        """A tool call the model asked for (model_calls.ModelCall, finished): its arguments are the
        model's words too, shown in `tool_call` and sent to the tool. A `block` word raises
        ScreenBlocked; `mask` words are masked in each string of the arguments."""
        if not self.active or not call.arguments:
            return []
        matcher = self.matchers.by_stage[ANSWER]
        hits = matcher.hits(call.arguments)
        if block := first_block(hits):
            logger.warning("moderation: tool call arguments blocked category={}", block.category)
            raise ScreenBlocked(Moderation(stage=ANSWER, action="block", category=block.category,
                                           held=call.arguments))
        if not hits:
            return []
        call.args = _strings_masked(call.args, matcher)
        call.arguments = json.dumps(call.args, ensure_ascii=False)
        return self._masks_told(ANSWER, Screened(shown="", masked=tuple(h for h in hits if h.action == "mask")))

    def _stage(self, stage: str) -> StreamScreen:
        screen = self._stages.get(stage)
        if screen is None:
            screen = self._stages[stage] = StreamScreen(self.matchers.by_stage[stage])
        return screen

    def _shown(self, stage: str, screened: Screened) -> list[Event]:
        if screened.blocked is not None:
            logger.warning("moderation: {} blocked category={}", stage, screened.blocked.category)
            held = self._stages[stage].held if stage in self._stages else ""
            raise ScreenBlocked(Moderation(stage=stage, action="block", category=screened.blocked.category,
                                           held=held))
        events = self._masks_told(stage, screened)
        if screened.shown:
            events.append(_text_event(stage, screened.shown))
        return events

    def _tool_shown(self, event: ToolChunk | ToolResult, screened: Screened) -> list[Event]:
        events: list[Event] = self._masks_told(ANSWER, screened)
        if screened.shown:
            events.append(ToolChunk(call_id=event.call_id, tool=event.tool, content=screened.shown))
        return events

    def _result_screened(self, result: ToolResult, *, streamed: Hit | None) -> list[Event]:
        """The result as stored, sent to the model and shown after a reload: masked, or, with a
        `block` word in it or in the tool's live text (`streamed`), replaced."""
        hits = self.matchers.by_stage[ANSWER].hits(result.content)
        block = streamed or first_block(hits)
        if block is not None:
            logger.warning("moderation: tool {} text blocked category={}", result.tool, block.category)
            notice = Moderation(stage=ANSWER, action="block", category=block.category, held=result.content)
            return [notice, replace(result, ok=False, content=TOOL_TEXT_BLOCKED_FOR_MODEL,
                                    error=str(TOOL_TEXT_BLOCKED_TEXT))]
        events: list[Event] = self._masks_told(ANSWER, Screened(shown="", masked=tuple(hits)))
        if hits:
            result = replace(result, content=masked(result.content, hits))
        return [*events, result]

    def _masks_told(self, stage: str, screened: Screened) -> list[Event]:
        events: list[Event] = []
        for hit in screened.masked:
            if (stage, hit.category) not in self._told:
                self._told.add((stage, hit.category))
                events.append(Moderation(stage=stage, action="mask", category=hit.category))
        return events


@dataclass
class _Segments:
    """A stage's text the moderation model has not passed yet, cut into segments to ask it about."""

    pending: str = ""
    context: str = ""  # the end of the last segment passed: the model reads it with the next

    def take(self, *, final: bool) -> str:
        """The next segment to check (empty: not complete yet): up to the last sentence end once
        SEGMENT_MIN_CHARS are held, or SEGMENT_MAX_CHARS whatever they are, or all at the end."""
        if len(self.pending) >= SEGMENT_MAX_CHARS:
            cut = SEGMENT_MAX_CHARS
        elif final:
            cut = len(self.pending)
        elif len(self.pending) >= SEGMENT_MIN_CHARS and (ends := list(SENTENCE_END.finditer(self.pending))):
            cut = ends[-1].end()
        else:
            return ""
        segment, self.pending = self.pending[:cut], self.pending[cut:]
        return segment

    def pending_all(self, segment: str) -> str:
        return segment + self.pending


def _strings_masked(value, matcher):
    if isinstance(value, str):
        return masked(value, matcher.hits(value))
    if isinstance(value, dict):
        return {key: _strings_masked(item, matcher) for key, item in value.items()}
    if isinstance(value, list):
        return [_strings_masked(item, matcher) for item in value]
    return value


def _text_event(stage: str, text: str) -> Event:
    return Reasoning(content=text) if stage == REASONING else Chunk(content=text)


async def turn_screens(ctx: RunContext) -> TurnScreens:
    """The screens of a turn: with the word lists its admission checked the question against
    (`ctx.matchers`: a change saved in between applies from the next turn, as one saved during a
    turn does), else as they are now (one read of the lists' stamp)."""
    return TurnScreens(ctx.matchers if ctx.matchers is not None else await db_call(matchers_current))
