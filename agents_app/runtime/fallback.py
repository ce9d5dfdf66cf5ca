"""Keyword routing: how a turn is answered when the model is down (issue #6).

turn.py calls `fallback_turn` when the runtime raises LlmUnavailable (no model configured, or
the model failed before any text) and settings.KEYWORD_FALLBACK_ENABLED is on.

Chinese has no spaces between words, so keywords are not found by splitting the question;
instead each tool's description is split on punctuation into keyword candidates ("食堂、菜单、
吃什么" → 食堂 / 菜单 / 吃什么), and a candidate that occurs in the question scores its length
divided by how many tools share it (a word every tool mentions decides nothing). English
keywords in a description ("Keywords: canteen, lunch, menu") match whole words, with or without
a plural ending, so a student asking in English is routed too.

Without the model nothing reads the conversation or the attachments: the answer says so (once for
the conversation, each time for attachments) in the student's language.
"""
import json
import re
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing
from dataclasses import dataclass

from django.conf import settings
from django.utils import translation
from django.utils.translation import gettext_lazy as _
from loguru import logger

from agents_app.models import Agent
from agents_app.runtime.budget import BudgetSpent, turn_deadline
from agents_app.runtime.context import RunContext
from agents_app.runtime.events import Chunk, Done, Error, Event, ToolCall, ToolChunk, ToolResult
from agents_app.runtime.loop import NOT_CONFIGURED_REASON, TURN_TIMEOUT_TEXT
from agents_app.runtime.screening import TurnScreens, turn_screens
from agents_app.runtime.tool import Tool
from agents_app.runtime.tool_runs import ToolRequest, tool_calls_run
from agents_app.runtime.tools import tools_for_agent
from campus_agent.base.approval import ApprovalPolicy
from campus_agent.base.redaction import clip_text
from campus_agent.base.request_id import request_id_set
from campus_agent.base.text import text_head

NOTICE = _("（AI 模型暂不可用，以下内容由关键词匹配自动转给“{tool}”回答）\n\n")
NO_MATCH_NOTICE = _("（AI 模型暂不可用，关键词匹配也没有找到能回答这个问题的服务。）\n\n")
# With no model configured at all (LLM_BASE_URL empty, the keyless demo) "暂不可用" reads like an
# outage; say what it is.
UNCONFIGURED_NOTICE = _("（未配置 AI 模型，以下内容由关键词匹配自动转给“{tool}”回答）\n\n")
UNCONFIGURED_NO_MATCH_NOTICE = _("（未配置 AI 模型，关键词匹配没有找到能回答这个问题的服务。）\n\n")


def model_configured(*, reason: str | None = None) -> bool:
    """Whether a model is configured, so that "暂不可用" is true: not when the agent has no enabled
    provider (`reason` NOT_CONFIGURED_REASON), or, with no reason, when LLM_BASE_URL is empty."""
    return reason != NOT_CONFIGURED_REASON if reason is not None else bool(settings.LLM_BASE_URL)


def fallback_notices(*, reason: str | None = None) -> tuple[str, str]:
    """(notice before a routed answer, notice when nothing matched), by `model_configured`."""
    if model_configured(reason=reason):
        return NOTICE, NO_MATCH_NOTICE
    return UNCONFIGURED_NOTICE, UNCONFIGURED_NO_MATCH_NOTICE


CAPABILITIES_HEADER = _("我目前可以帮你：\n")
CAPABILITIES_FOOTER = _("\n\n提问时带上上面列出的关键词，我就能转给对应的服务；AI 模型恢复后可以直接提问。")
# With none configured there is nothing to come back: say when free questions will work.
UNCONFIGURED_CAPABILITIES_FOOTER = _(
    "\n\n提问时带上上面列出的关键词，我就能转给对应的服务；管理员配置 AI 模型后可以直接提问。"
)
NO_TOOLS_TEXT = _("当前智能体还没有配置任何服务，请稍后再试或联系管理员。")
# What keyword routing cannot do, told to the student (issue 42): it reads neither the files
# attached (each time some are) nor the conversation before the question (once a conversation).
ATTACHMENTS_UNREAD_NOTE = _("（附件要由 AI 模型读取，这次没有读你附的文件。）\n\n")
FOLLOW_UP_NOTE = _(
    "（关键词匹配只看这一条消息，不联系前面的对话：追问时请把问题说完整，比如“清真食堂中午吃什么”。）\n\n"
)

# Fragments of descriptions that name no topic; they would route every question somewhere.
STOP_WORDS = frozenset(
    {"查询", "信息", "校园", "学生", "服务", "相关", "可以", "提供", "关键词", "触发关键词", "演示", "助手",
     "参数", "可选", "无需参数", "回答", "问题", "工具", "call", "tool", "tools", "mcp", "get", "list", "the",
     "keyword", "keywords"}
)
_SPLIT = re.compile(r"[\s、，,;；：:。.！!？?（）()【】\[\]{}<>《》“”\"'‘’/|_\-]+")
_ASCII = re.compile(r"^[a-z0-9]+$")
MIN_KEYWORD_CHARS = 2
MAX_KEYWORD_CHARS = 12
CAPABILITY_MAX_CHARS = 60
CAPABILITY_MAX_LINES = 12


def keyword_candidates(*, text: str) -> set[str]:
    """Lower-cased fragments of `text` between punctuation that are plausible keywords."""
    return {
        fragment
        for fragment in _SPLIT.split((text or "").lower())
        if MIN_KEYWORD_CHARS <= len(fragment) <= MAX_KEYWORD_CHARS and fragment not in STOP_WORDS
    }


def tool_keywords(*, tool: Tool) -> set[str]:
    """A tool's keywords: its description's fragments plus the words of its `keyword_text`
    (`campus-calendar__current_time` → campus, calendar, current, time)."""
    return keyword_candidates(text=tool.description) | keyword_candidates(text=tool.keyword_text)


def _occurs(keyword: str, question: str) -> bool:
    if _ASCII.match(keyword):  # "time" must not match "sometimes"; "course" matches "courses"
        return re.search(rf"(?<![a-z0-9]){re.escape(keyword)}(?:e?s)?(?![a-z0-9])", question) is not None
    return keyword in question


@dataclass(frozen=True, slots=True)
class ToolMatch:
    tool: Tool
    score: float
    keywords: tuple[str, ...]


def tool_match(*, question: str, tools: Sequence[Tool]) -> ToolMatch | None:
    """The tool whose keywords best cover `question`, or None when none occurs in it.

    Ties go to more matched keywords, then to tools that answer in prose (sub-agents answer in
    full sentences, MCP tools return raw data), then to the smaller name, so the choice never
    depends on the order tools were listed in.
    """
    text = (question or "").lower()
    keywords = {tool.name: tool_keywords(tool=tool) for tool in tools}
    shared = Counter(word for words in keywords.values() for word in words)
    ranked: list[tuple[tuple, ToolMatch]] = []
    for tool in tools:
        hits = [word for word in keywords[tool.name] if _occurs(word, text)]
        # "一食堂" in the question also contains "食堂": count the longer keyword only.
        hits = sorted(word for word in hits if not any(word != other and word in other for other in hits))
        if not hits:
            continue
        score = sum(len(word) / shared[word] for word in hits)
        match = ToolMatch(tool=tool, score=score, keywords=tuple(hits))
        ranked.append(((-score, -len(hits), not tool.answers_in_prose, tool.name), match))
    return min(ranked, key=lambda pair: pair[0])[1] if ranked else None


# Names of a parameter that takes free text: the question goes in whole (query-like) or as the
# keywords it matched (keyword-like: a filter such as the demo calendar's `keyword`).
QUERY_PARAMETERS = frozenset({"query", "q", "question", "text", "message", "prompt", "input", "content", "ask"})
KEYWORD_PARAMETERS = frozenset({"keyword", "keywords", "kw", "term", "terms", "search", "topic", "subject", "filter"})
# A required string named like these wants a value of its own shape (a date, an id …), not a sentence.
_STRUCTURED_NAME = re.compile(r"(^|_)(date|day|time|datetime|id|uuid|url|uri|email|phone|path|file|code|number|no)$")


def _text_parameter(name: str, schema) -> bool:
    """A string parameter that free text can fill: no enum, format, pattern or const to match."""
    return (isinstance(schema, dict) and schema.get("type") == "string"
            and not any(key in schema for key in ("enum", "format", "pattern", "const")))


def fallback_schema_args(*, parameters: dict, question: str, keywords: Sequence[str] = ()) -> dict | None:
    """Arguments for a tool from its JSON Schema when all there is is the question (issue 20 #14),
    or None when it needs something that would have to be guessed:

    - a parameter named like a query (`query`, `q`, `question`, `text` …) gets the question, one
      named like a filter (`keyword`, `search` …) the matched keywords (or the question);
    - a single required string parameter (not a date, an id … by its name or its schema) gets
      the question too;
    - any other required parameter: None. No required parameter and no text one: `{}`.
    """
    properties = parameters.get("properties") if isinstance(parameters, dict) else None
    properties = properties if isinstance(properties, dict) else {}
    required = parameters.get("required") if isinstance(parameters, dict) else None
    required = [name for name in required if isinstance(name, str)] if isinstance(required, list) else []
    words = " ".join(keywords) or question
    args: dict = {}
    for name, schema in properties.items():
        if not isinstance(name, str) or not _text_parameter(name, schema):
            continue
        if name.lower() in QUERY_PARAMETERS:
            args[name] = question
        elif name.lower() in KEYWORD_PARAMETERS:
            args[name] = words
    missing = [name for name in required if name not in args]
    if not missing:
        return args
    if len(required) == 1 and _text_parameter(missing[0], properties.get(missing[0])) \
            and not _STRUCTURED_NAME.search(missing[0].lower()):
        return {missing[0]: question}
    return None


def tool_fallback_args(*, tool: Tool, question: str, keywords: Sequence[str] = ()) -> dict | None:
    """The arguments keyword routing can call `tool` with, or None when it cannot. A tool that
    names its own (a sub-agent takes the question as its `message`) is called with those;
    otherwise they come from its parameters' schema (`fallback_schema_args`). Never a tool that
    needs a person's approval: without the model there is nobody to explain what is being
    approved."""
    if tool.approval != ApprovalPolicy.AUTO:
        return None
    own = tool.fallback_args(question)
    if own:
        return own
    return fallback_schema_args(parameters=getattr(tool, "parameters", {}), question=question, keywords=keywords)


def tool_label(*, tool: Tool) -> str:
    """What the notice calls the tool: the head of its description ("食堂助手（演示）") when
    short, else its name."""
    return text_head(tool.description) or tool.name


def english_keywords(*, text: str, limit: int = 8) -> list[str]:
    """The English keywords of a description, in the order written ("… Keywords: canteen, menu")."""
    fragments = _SPLIT.split((text or "").lower())
    candidates = keyword_candidates(text=text)
    words = [word for word in dict.fromkeys(fragments) if word in candidates and _ASCII.match(word)]
    return words[:limit]


def _capability_line(tool: Tool, *, chinese: bool) -> str:
    """One tool of the no-match answer: its description's first sentence; for a student reading
    another language, its name and the English keywords that route to it, when it has some (the
    Chinese sentence would suggest keywords the student does not type)."""
    english = [] if chinese else english_keywords(text=tool.description)
    if english:
        return f"- {tool_label(tool=tool)}: {', '.join(english)}"
    first = re.split(r"(?<=[。！？!?])", (tool.description or tool.name).strip(), maxsplit=1)[0]
    return "- " + clip_text(first, CAPABILITY_MAX_CHARS)


def capabilities_text(*, tools: Sequence[Tool], configured: bool = True) -> str:
    """The no-match answer: what each tool does (those that answer in prose first), from its
    description, in the language of the run; and when free questions will work again (the model
    is back, or once one is `configured`)."""
    if not tools:
        return NO_TOOLS_TEXT
    chinese = (translation.get_language() or settings.LANGUAGE_CODE).startswith("zh")
    ordered = sorted(tools, key=lambda tool: (not tool.answers_in_prose, tool.name))
    lines = [_capability_line(tool, chinese=chinese) for tool in ordered[:CAPABILITY_MAX_LINES]]
    footer = CAPABILITIES_FOOTER if configured else UNCONFIGURED_CAPABILITIES_FOOTER
    return CAPABILITIES_HEADER + "\n".join(lines) + footer


@dataclass(frozen=True, slots=True)
class Question:
    text: str  # the student's own words (not the text of what they attached)
    attached: bool  # files came with it (content parts after the text: conversations/history.py)
    follows_up: bool  # an earlier question of the conversation is in the history


def question_of(*, history: list[dict]) -> Question:
    """The last user message of `history`, as keyword routing reads it."""
    asked = [message for message in history if message.get("role") == "user"]
    if not asked:
        return Question(text="", attached=False, follows_up=False)
    text, attached = asked[-1].get("content"), False
    if isinstance(text, list):  # the question's text first, then one part per attachment
        parts = [part for part in text if isinstance(part, dict)]
        text = parts[0].get("text") if parts and parts[0].get("type") == "text" else ""
        attached = len(parts) > 1
    return Question(text=text if isinstance(text, str) else "", attached=attached, follows_up=len(asked) > 1)


def _said_before(note, history: list[dict]) -> bool:
    """Whether an earlier answer in `history` already told the student `note`, in any language."""
    said = []
    for code, _name in settings.LANGUAGES:
        with translation.override(code):
            said.append(str(note).strip())
    answers = [m.get("content") for m in history if m.get("role") == "assistant" and isinstance(m.get("content"), str)]
    return any(text in answer for answer in answers for text in said)


def fallback_notes(*, question: Question, history: list[dict]) -> str:
    """What this answer must say keyword routing did not read: the attachments, the conversation."""
    notes = ""
    if question.attached:
        notes += str(ATTACHMENTS_UNREAD_NOTE)
    if question.follows_up and not _said_before(FOLLOW_UP_NOTE, history):
        notes += str(FOLLOW_UP_NOTE)
    return notes


async def _tools_of(agent: Agent, ctx: RunContext) -> list[Tool]:
    try:  # the student's tools only: keyword routing never routes to what their groups may not use
        return list(await tools_for_agent(agent, audience=ctx.audience))
    except Exception as exc:  # noqa: BLE001 - an unreadable catalog must not crash the fallback
        logger.warning("fallback routing: tools unavailable: {}: {}", type(exc).__name__, exc)
        return []


async def _relay(*, tool: Tool, args: dict, ctx: RunContext, call_id: str, deadline: float, screens: TurnScreens):
    """Runs the tool as the tool loop would (tool_runs.py), yielding its ToolChunk / ToolResult
    (/ 40102 Error) events as the word lists let them be shown (screening.py); when the turn
    budget runs out first, a failed result says so."""
    request = ToolRequest(call_id=call_id, tool=tool.name, args=args)
    runs = tool_calls_run(calls=[request], tools_by_name={tool.name: tool}, ctx=ctx, deadline=deadline)
    try:
        async with aclosing(runs):  # closing the turn closes the run: the tool is cancelled
            async for event in runs:
                for shown in screens.tool_event(event):
                    yield shown
    except BudgetSpent:
        yield ToolResult(call_id=call_id, tool=tool.name, ok=False, content=TURN_TIMEOUT_TEXT, error=TURN_TIMEOUT_TEXT)


async def fallback_turn(*, agent: Agent, history: list[dict], ctx: RunContext, reason: str) -> AsyncIterator[Event]:
    """Answers a turn without the model.

    1. Take the last user message (its own words, not its attachments' text) and the agent's
       tools (the same catalog the model would see).
    2. Keep the tools keyword routing can call (`tool_fallback_args`: a sub-agent's `message`, a
       text parameter, or none required) and pick the best keyword match (`tool_match`).
    3. No match: answer with what the assistant can do, from the tools' descriptions (their
       English keywords for a student reading English).
    4. Else yield the notice, call the tool with the question (or its matched keywords) in its
       text parameter, stream its live text as the answer while it comes (Chunk, not
       ToolChunk), relay its result, then whatever of its answer was not streamed, with its
       chart. A failure is said once: by its `error` event when the tool has a contract code,
       else as the answer's text.
    The notice is followed by `fallback_notes`: the attachments were not read, the conversation
    before the question is not seen. Every text event and the Done carry `fallback=True`.
    """
    request_id_set(ctx.request_id)
    deadline = turn_deadline(ctx)
    asked = question_of(history=history)
    question = asked.text
    tools = await _tools_of(agent, ctx)
    callable_tools = [tool for tool in tools if tool_fallback_args(tool=tool, question=question) is not None]
    match = tool_match(question=question, tools=callable_tools)
    logger.warning(
        "fallback routing: reason={} tool={} keywords={} question={}",
        clip_text(reason, 120),
        match.tool.name if match else None,
        ",".join(match.keywords) if match else "",
        clip_text(question),
    )
    routed_notice, no_match_notice = fallback_notices(reason=reason)
    notes = fallback_notes(question=asked, history=history)
    if match is None:
        text = no_match_notice + notes + capabilities_text(tools=tools, configured=model_configured(reason=reason))
        yield Chunk(text, fallback=True)
        yield Done(full_text=text, fallback=True)
        return

    tool = match.tool
    notice = routed_notice.format(tool=tool_label(tool=tool)) + notes
    yield Chunk(notice, fallback=True)
    call_id = "call_fallback_" + uuid.uuid4().hex[:16]
    args = tool_fallback_args(tool=tool, question=question, keywords=match.keywords)
    yield ToolCall(call_id=call_id, tool=tool.name, args=json.dumps(args, ensure_ascii=False))
    result: ToolResult | None = None
    streamed: list[str] = []
    told_error = False
    screens = await turn_screens(ctx)
    async for event in _relay(tool=tool, args=args, ctx=ctx, call_id=call_id, deadline=deadline, screens=screens):
        if isinstance(event, ToolChunk):
            # Without a model the tool's own text is the answer: streamed as answer text while it
            # comes (issue 20 #13), not held in the tool's collapsed chip until the end.
            streamed.append(event.content)
            yield Chunk(event.content, fallback=True)
            continue
        if isinstance(event, ToolResult):
            result = event
        elif isinstance(event, Error):
            told_error = True  # the student is shown it (the page's red box)
        yield event
    shown = "".join(streamed)
    if result.ok:
        answer = result.shown or result.content  # a collection's passages, as the student reads them
        # The rest of the answer the stream did not carry (a sub-agent's `done.full_text` may say
        # more than its chunks; an MCP tool streams nothing).
        tail = answer[len(shown):] if answer.startswith(shown) else ("" if shown else answer)
    elif told_error:
        # Its `error` frame already says it: the same sentence again as the answer would show it
        # twice (issue 20 #11).
        tail = ""
    else:
        # The student reads this answer directly: a failure shows its student-facing text
        # (ToolResult.error), never the model's, which may hold an exception.
        tail = ("\n\n" if shown else "") + (result.error or result.content)
    if tail:
        yield Chunk(tail, fallback=True)
    sources = [{**source, "call_id": call_id} for source in result.sources or ()]  # a collection's, as the loop's
    yield Done(full_text=notice + shown + tail, chart=result.chart, fallback=True, sources=sources or None)
