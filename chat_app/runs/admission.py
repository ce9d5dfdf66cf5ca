"""A new turn's admission (docs/design.md#the-chat-stream): everything decided before it runs, and
its first writes — the conversation, the question and the run's row — before the model is called.

The order of the answers is fixed: 401/403 (who is calling) → 415/413/400 (the body, read only
once the caller is known) → 429 (a stream slot, the message rate: the run's lease,
chat_app.runs.lease; the daily tokens) → 404/400 (the conversation, the agent, the hint, the
attachments) → 409 (the conversation's run has not ended) → the question stored. The caller and the body are the gateway's (accounts,
chat_input); the rest is `turn_open`, which the run's task runs inside its lease
(chat_app.runs.engine), crossing into the database once for the quota and the writes — together
with the other turns that arrive at the same moment (`ADMISSIONS`, a group commit). When staff
enabled a moderation model for questions, it is asked once everything else has admitted the turn
and the word lists have not blocked the question — between two crossings, a network call of at
most its timeout that holds no database thread — and the question is stored with its verdict.
"""
import uuid
from dataclasses import dataclass

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from agents_app.access import Audience, agent_for, agent_of_conversation, audience_of, tools_for
from agents_app.models import Agent
from campus_agent.base import errors
from campus_agent.base.asyncdb import db_call
from campus_agent.base.errors import GENERAL
from campus_agent.base.group_commit import GroupCommit
from campus_agent.base.text import label_clean, text_clean
from chat_app.accounts.authentication import Caller
from chat_app.conversations.history import history_build
from chat_app.conversations.selectors import conversation_for_turn
from chat_app.conversations.uploads import upload_payload
from chat_app.models import DEFAULT_TITLE, Conversation, Message, Run, Upload
from chat_app.runs.chat_input import ChatInput
from chat_app.runs.group_limits import caller_standing
from chat_app.runs.lease import RunLease
from chat_app.runs.moderation import QuestionCheck, question_check, question_model_checked
from chat_app.runs.quota import user_token_quota_check
from chat_app.runs.state import run_active_get, run_create

TITLE_MAX = 24
CONVERSATION_BUSY = 40905
MSG_CONVERSATION_BUSY = _("这个对话上一轮还没有结束（正在回答，或在等你操作），请等它结束或先停止它，再发新问题。")


def conversation_title(*, first_message: str) -> str:
    """The question as a label (campus_agent.base.text.label_clean: one line, nothing that misleads);
    empty → 新对话; longer than 24 characters → the first 24 + "..."."""
    flat = label_clean(first_message or "")
    if not flat:
        return DEFAULT_TITLE
    return flat if len(flat) <= TITLE_MAX else flat[:TITLE_MAX] + "..."


@dataclass(frozen=True)
class TurnStart:
    run: Run
    agent: Agent
    history: list[dict]
    user_message_id: uuid.UUID
    hint_domain: str | None
    audience: Audience  # the caller's groups: which of the agent's tools the turn offers
    moderation: QuestionCheck  # blocked: the turn answers with a fixed message, the model is not called

    @property
    def conversation_id(self) -> uuid.UUID:
        return self.run.conversation_id


def _agent_for(*, wanted: str | None, conversation: Conversation | None, audience: Audience) -> Agent:
    """The agent asked for by slug (400 unless enabled and the caller's groups may use it: one
    they may not is answered as one that does not exist), else the conversation's while it is
    enabled and theirs to use, else their default (503 when they may use no agent). A
    conversation whose agent was since limited to other groups goes on with the default, as one
    whose agent was disabled does (docs/design.md#campus-identity-and-audit)."""
    if wanted:
        agent = agent_for(audience=audience, slug=wanted)
        if agent is None:
            raise errors.invalid_body(errors.MSG_AGENT_UNKNOWN)
        return agent
    agent = agent_of_conversation(audience=audience,
                                  agent_id=conversation.agent_id if conversation is not None else None)
    if agent is None:
        raise errors.ApiError(errors.MSG_NO_AGENT, code=GENERAL, status=503)
    return agent


def _hint_domain_check(*, agent: Agent, audience: Audience, hint_domain: str | None) -> None:
    """A hint names one of the domains the agent can route to: the `domain` of one of its enabled
    sub-agents the caller may use (its catalog, just loaded). Per agent, because a hint only makes the model prefer
    that domain's tools, and an agent without them has nothing to prefer; a free text would reach
    the model as written. Raises 400 (40001) otherwise."""
    if hint_domain is None:
        return
    domains = sorted({sub.domain for sub in tools_for(agent=agent, audience=audience)[1] if sub.domain})
    if hint_domain in domains:
        return
    if not domains:
        raise errors.invalid_body(errors.MSG_HINT_DOMAIN_NONE)
    raise errors.invalid_body(errors.MSG_HINT_DOMAIN_UNKNOWN.format(domains="、".join(domains)))


MSG_ATTACHMENT_NOT_FOUND = _("附件不存在。")
MSG_ATTACHMENT_ELSEWHERE = _("附件《{name}》已经发在另一个对话里了，请重新上传。")


def _attachments_of(*, user, ids: tuple, conversation: Conversation | None) -> list[Upload]:
    """The caller's uploads named by the question, in its order: 404 when one is not theirs (or
    does not exist), 400 when one was sent in another conversation already (deleting that one
    takes the file)."""
    if not ids:
        return []
    found = {u.id: u for u in Upload.objects.filter(user=user, id__in=ids)}
    if len(found) != len(ids):
        raise errors.ApiError(MSG_ATTACHMENT_NOT_FOUND, code=errors.NOT_FOUND, status=404)
    for upload in found.values():
        if upload.conversation_id is not None and (conversation is None or upload.conversation_id != conversation.id):
            raise errors.invalid_body(MSG_ATTACHMENT_ELSEWHERE.format(name=upload.name))
    return [found[i] for i in ids]


def _opening_rows(opening: tuple[tuple[str, str], ...]) -> list[Message]:
    """The rows a new conversation opens with (ChatInput.opening), marked as the client's, in
    order (`seq`): they share one timestamp."""
    roles = {Message.Role.USER, Message.Role.ASSISTANT}
    return [Message(role=role, content=text_clean(text), meta={"from_client": True}, seq=position)
            for position, (role, text) in enumerate(((r, t) for r, t in opening if r in roles), start=1)]


@dataclass
class TurnDraft:
    """A turn admitted up to storing its question: what `turn_draft` resolved, with the question's
    check (the word lists'; `check.model`: the moderation model still to ask)."""

    user: object
    chat: ChatInput
    request_id: str
    slot_key: str
    audience: Audience
    agent: Agent
    conversation: Conversation | None  # None: a new one
    message: str  # cleaned, as the student wrote it
    hint_domain: str | None
    uploads: list[Upload]
    opening: list[Message]
    check: QuestionCheck


def turn_draft(*, user, chat: ChatInput, request_id: str, slot_key: str, audience: Audience | None = None) -> TurnDraft:
    """Resolves the conversation (404 unless the caller's) and agent (with its enabled tools
    catalog, as far as `audience` — the caller's groups, read now when not given — may use it),
    checks `hint_domain` against that catalog (400), the attachments (404/400), that the
    conversation's run has ended (409), and the question against the word lists. Writes nothing."""
    # The parser refuses text no database can hold; cleaning again costs nothing and keeps this
    # write safe whoever calls it.
    message, hint_domain = text_clean(chat.message), text_clean(chat.hint_domain)
    conversation = None
    if chat.conversation_id is not None:
        conversation = conversation_for_turn(user=user, conversation_id=chat.conversation_id)
        if conversation is None:
            raise errors.not_found()
    audience = audience if audience is not None else audience_of(user=user)
    agent = _agent_for(wanted=chat.agent, conversation=conversation, audience=audience)
    _hint_domain_check(agent=agent, audience=audience, hint_domain=hint_domain)
    uploads = _attachments_of(user=user, ids=chat.attachments, conversation=conversation)
    if conversation is not None and conversation.active_run_id is not None:
        raise _conversation_busy()
    opening = _opening_rows(chat.opening) if conversation is None else []
    check = question_check(message, *(row.content for row in opening if row.role == Message.Role.USER))
    return TurnDraft(user=user, chat=chat, request_id=request_id, slot_key=slot_key, audience=audience, agent=agent,
                     conversation=conversation, message=message, hint_domain=hint_domain, uploads=uploads,
                     opening=opening, check=check)


def turn_store(draft: TurnDraft, *, check: QuestionCheck | None = None) -> TurnStart:
    """Stores the user message with the turn's run row (run by this worker, holding the slot
    `draft.slot_key`) — masked where a `mask` word was, marked where the question is blocked —
    and builds the history the model will see. `check`: the draft's once its moderation model was
    asked (chat_app.runs.moderation.question_model_checked)."""
    moderation = check if check is not None else draft.check
    conversation, agent, uploads, opening = draft.conversation, draft.agent, draft.uploads, draft.opening
    new_conversation = conversation is None
    message = draft.message
    if moderation.blocked is None:  # the texts as stored and sent: masked
        message = moderation.texts[0]
        for row, text in zip([r for r in opening if r.role == Message.Role.USER], moderation.texts[1:], strict=True):
            row.content = text
    try:
        user_message, run = _turn_store(user=draft.user, chat=draft.chat, conversation=conversation, agent=agent,
                                        message=message, hint_domain=draft.hint_domain, uploads=uploads,
                                        opening=opening, request_id=draft.request_id, slot_key=draft.slot_key,
                                        blocked=moderation.blocked)
    except IntegrityError:
        # Two questions at once (two workers): the database keeps one run per conversation
        # active (Run's constraint); the later one stored nothing.
        if conversation is not None and run_active_get(conversation_id=conversation.id) is not None:
            raise _conversation_busy() from None
        raise
    conversation = run.conversation
    if moderation.blocked is not None:  # the model is not called: it needs no history
        history = []
    elif new_conversation and not uploads and not opening:  # nothing before the question: no need to read it back
        history = [{"role": "user", "content": user_message.content}]
    else:
        history = history_build(conversation=conversation, limit=settings.MAX_HISTORY, images=agent.reads_images())
    return TurnStart(
        run=run,
        agent=agent,
        history=history,
        user_message_id=user_message.id,
        hint_domain=conversation.hint_domain or None,
        audience=draft.audience,
        moderation=moderation,
    )


def turn_begin(*, user, chat: ChatInput, request_id: str, slot_key: str, audience: Audience | None = None) -> TurnStart:
    """`turn_draft` then `turn_store`, the moderation model aside (the run's opening asks it:
    `turn_open`)."""
    return turn_store(turn_draft(user=user, chat=chat, request_id=request_id, slot_key=slot_key, audience=audience))


def _conversation_busy() -> errors.ApiError:
    return errors.ApiError(MSG_CONVERSATION_BUSY, code=CONVERSATION_BUSY, status=409)


def _turn_store(*, user, chat: ChatInput, conversation: Conversation | None, agent: Agent, message: str,
                hint_domain: str | None, uploads: list[Upload], opening: list[Message], request_id: str,
                slot_key: str, blocked: str | None) -> tuple[Message, Run]:
    """The turn's first writes, in one transaction: the conversation (new, or its agent and hint),
    the opening rows, the question, its attachments claimed, the run's row. A question `blocked`
    by the word lists is marked with the list's category (never the word), and gives a new
    conversation no title of its words."""
    new_conversation = conversation is None
    with transaction.atomic():
        if new_conversation:
            conversation = Conversation.objects.create(
                user=user,
                agent=agent,
                title=DEFAULT_TITLE if blocked else conversation_title(first_message=opening[0].content if opening else message),
                hint_domain=hint_domain or "",
            )
            for row in opening:
                row.conversation, row.request_id = conversation, request_id
            Message.objects.bulk_create(opening)
        else:
            conversation.agent = agent
            if hint_domain is not None:
                conversation.hint_domain = hint_domain
            conversation.save(update_fields=["agent", "hint_domain", "updated_at"])
        meta = {"attachments": [upload_payload(u) for u in uploads]} if uploads else {}
        if blocked is not None:
            meta["blocked"] = {"category": blocked}
        user_message = Message.objects.create(  # after the opening's rows, however coarse the clock
            conversation=conversation, role=Message.Role.USER, content=message, request_id=request_id, meta=meta,
            seq=len(opening) + 1 if opening else 0,
        )
        if uploads:
            # Claimed in this transaction: a question sent at the same moment in another
            # conversation with the same file loses (and stores nothing).
            claimed = (Upload.objects.filter(id__in=[u.id for u in uploads])
                       .filter(Q(conversation__isnull=True) | Q(conversation=conversation)).update(conversation=conversation))
            if claimed != len(uploads):
                raise errors.invalid_body(MSG_ATTACHMENT_ELSEWHERE.format(name=uploads[0].name))
        run = run_create(conversation=conversation, user=user, request_id=request_id, agent_name=agent.name,
                         slot_key=slot_key, language=chat.language or "")
    return user_message, run


def turn_admit(*, caller: Caller, chat: ChatInput, request_id: str, lease: RunLease) -> TurnStart | TurnDraft:
    """The caller's groups and their limits (one query: chat_app.runs.group_limits), the message
    rate (429 42902: the lease has counted the message) and the daily tokens (429 42904), then
    `turn_draft` holding the lease's slot, and `turn_store` unless a moderation model is still to
    be asked about the question (then the draft is returned). Sync: one crossing from the run's
    task."""
    audience, limits = caller_standing(user=caller.user)
    lease.refuse_unless_held(rate_per_minute=limits.chat_rate_per_minute)
    user_token_quota_check(user_id=caller.user.pk, quota=limits.daily_token_quota)
    draft = turn_draft(user=caller.user, chat=chat, request_id=request_id, slot_key=lease.key, audience=audience)
    return draft if draft.check.model is not None else turn_store(draft)


@dataclass(frozen=True)
class Admission:
    caller: Caller
    chat: ChatInput
    request_id: str
    lease: RunLease


def _admitted_alone(admission: Admission) -> TurnStart | TurnDraft:
    return turn_admit(caller=admission.caller, chat=admission.chat, request_id=admission.request_id,
                      lease=admission.lease)


def turns_admit(admissions: list[Admission]) -> list[TurnStart | TurnDraft | Exception]:
    """`turn_admit` for several turns in one transaction: each turn's writes in their own savepoint
    (`_turn_store`'s), so one refused (409, 404, 429 …) is refused alone and the others stored.
    One outcome per admission, in order, an exception being its refusal."""
    outcomes: list[TurnStart | TurnDraft | Exception] = []
    with transaction.atomic():
        for admission in admissions:
            try:
                outcomes.append(_admitted_alone(admission))
            except errors.ApiError as refused:
                outcomes.append(refused)
    return outcomes


# The admissions that come together (a burst's questions) are written together
# (campus_agent.base.group_commit): one crossing and one transaction, each turn its own outcome.
ADMISSIONS: GroupCommit[Admission, TurnStart | TurnDraft] = GroupCommit(many=turns_admit, one=_admitted_alone)


async def turn_open(lease: RunLease, *, caller: Caller, chat: ChatInput, request_id: str) -> TurnStart:
    """A new turn's opening, inside its run's lease: 429 without a slot (no database), then
    `turn_admit`; when a moderation model checks questions (and the lists did not block this
    one), it is asked between two crossings — a network call of at most its timeout, holding no
    database thread — and the question stored with its verdict. Raises ApiError; nothing is
    stored when it does."""
    lease.refuse_without_slot()
    admitted = await ADMISSIONS(Admission(caller=caller, chat=chat, request_id=request_id, lease=lease))
    if isinstance(admitted, TurnStart):
        return admitted
    check = await question_model_checked(admitted.check)
    return await db_call(turn_store, admitted, check=check)
