"""The question checked against the moderation word lists, and the moderation model when one
checks questions, before anything of the turn is stored (docs/design.md#content-safety-and-labels).
Admission runs it for every gateway (REST, page, `/v1`, MCP, A2A): a `block` word, or the model's
flag, means the question is stored marked and answered with a fixed message, and neither the
model nor a tool is called; a `mask` word is masked in what is stored and sent to the model."""

from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, replace

from django.utils.translation import gettext_lazy as _

from agents_app.runtime.events import Chunk, Done, Event, Moderation
from audit_app.chain import Event as AuditEvent
from audit_app.chain import Outcome, audit_record
from safety_app.lists_cache import Matchers, matchers_current
from safety_app.matcher import first_block, masked
from safety_app.model_check import ModelConfig, config_verdict

STAGE = "question"
# What an audit row keeps of the text a `block` stopped (the answer's held text, a tool's result).
AUDIT_HELD_MAX_CHARS = 2000
MSG_QUESTION_BLOCKED = _("这个问题含有不适合讨论的内容，我无法回答。请换个问题。")


@dataclass(frozen=True)
class QuestionCheck:
    texts: tuple[str, ...]  # the texts as stored and sent: masked where a mask word was
    blocked: str | None  # the category of the first `block` word
    masked: tuple[str, ...]  # the categories of the masked words, each once
    asked: tuple[str, ...] = ()  # the texts as the student wrote them
    model: ModelConfig | None = None  # the moderation model still to ask (`question_model_checked`)
    # The word lists the texts were checked against: the turn's own screens start from them
    # (RunContext.matchers), so its way to the model reads their stamp once, here.
    matchers: Matchers | None = None

    @property
    def logged_question(self) -> str:
        """The question as the log may keep it: masked as stored, or only the category of a
        blocked one (a listed word never reaches the log)."""
        return f"<blocked: {self.blocked}>" if self.blocked is not None else self.texts[0]

    def notices(self) -> tuple[Moderation, ...]:
        if self.blocked is not None:
            return (Moderation(stage=STAGE, action="block", category=self.blocked),)
        return tuple(Moderation(stage=STAGE, action="mask", category=category) for category in self.masked)


def question_check(*texts: str) -> QuestionCheck:
    """The student's texts (the question, and the earlier questions a client sends with it)
    checked against the word lists in one pass each; when no list blocks them, `model` is the
    moderation model that checks questions, still to ask (`question_model_checked`). Sync: reads
    the lists' stamp (safety_app.lists_cache keeps the model with the lists)."""
    lists = matchers_current()
    matcher, model = lists.by_stage[STAGE], lists.models[STAGE]
    checked, masked_categories = [], {}
    for text in texts:
        hits = matcher.hits(text)
        if block := first_block(hits):
            return QuestionCheck(texts=texts, blocked=block.category, masked=(), asked=texts, matchers=lists)
        checked.append(masked(text, hits))
        masked_categories.update(dict.fromkeys(hit.category for hit in hits))
    return QuestionCheck(texts=tuple(checked), blocked=None, masked=tuple(masked_categories), asked=texts,
                         model=model if any(texts) else None, matchers=lists)


async def question_model_checked(check: QuestionCheck) -> QuestionCheck:
    """`check` once its moderation model has been asked about the texts as the student wrote them
    (one call for all of them, earliest first: safety_app.model_check): blocked with the model's
    category when flagged (or when it failed and fails closed), else as the lists left it. A
    network call, made outside the database's threads."""
    if check.model is None:
        return check
    text = "\n\n".join(reversed([text for text in check.asked if text]))
    verdict = await config_verdict(check.model, stage=STAGE, text=text)
    if verdict.flagged:
        return QuestionCheck(texts=check.asked, blocked=verdict.category, masked=(), asked=check.asked,
                             matchers=check.matchers)
    return replace(check, model=None)


def blocked_answer(notices: tuple[Moderation, ...]):
    """The events of a blocked question's turn, in place of the runtime's: the notice, the fixed
    message in the run's language (activated by the run), the end."""

    async def events(**_) -> AsyncIterator[Event]:
        text = str(MSG_QUESTION_BLOCKED)
        for notice in notices:
            yield notice
        yield Chunk(text)
        yield Done(full_text=text)

    return events


def notices_first(notices: tuple[Moderation, ...], events):
    """The runtime's events, after the notices of the words masked in the question."""

    async def wrapped(**kwargs) -> AsyncIterator[Event]:
        for notice in notices:
            yield notice
        async with aclosing(events(**kwargs)) as inner:  # closed with the run, as the runtime's own would be
            async for event in inner:
                yield event

    return wrapped


def moderation_audit(*, run, notice: Moderation) -> None:
    """One audit row per moderation hit of a run (docs/design.md#campus-identity-and-audit): the
    stage, action and category; for a `block` of the answer, its reasoning or a tool's text, the
    text it stopped (clipped), which nothing else keeps. A blocked question is kept as stored."""
    details = {"stage": notice.stage, "action": notice.action, "category": notice.category,
               "conversation": str(run.conversation_id), "run": str(run.id)}
    if notice.held:
        details["held"] = notice.held[:AUDIT_HELD_MAX_CHARS]
    audit_record(event=AuditEvent.MODERATION_HIT, actor=run.user,
                 outcome=Outcome.REFUSED if notice.action == "block" else Outcome.OK,
                 target=f"message:{run.message_id}", details=details)
