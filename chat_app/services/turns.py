"""Writes of a chat turn: the user message before the model runs, everything else after."""
import uuid
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agents_app.models import Agent
from agents_app.selectors import agent_catalog_load
from campus_agent.errors import GENERAL
from campus_agent.text import text_clean
from chat_app import api_errors as errors
from chat_app.chat_input import ChatInput
from chat_app.models import DEFAULT_TITLE, Conversation, Message, Run
from chat_app.quota import turn_usage_record
from chat_app.runs.approvals import paused_runs_close
from chat_app.runs.registry import WORKER_ID
from chat_app.selectors import agent_get_default, agent_get_enabled, conversation_get, history_build
from chat_app.services.recording import RowSpec, usage_columns

TITLE_MAX = 24


def conversation_title(*, first_message: str) -> str:
    """Whitespace collapsed; empty → 新对话; longer than 24 characters → the first 24 + "..."."""
    flat = " ".join((first_message or "").split())
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
    # Runs of the conversation that waited for approval, ended by this new question.
    closed_runs: tuple[Run, ...] = ()

    @property
    def conversation_id(self) -> uuid.UUID:
        return self.run.conversation_id


def _agent_for(*, wanted: str | None, conversation: Conversation | None) -> Agent:
    if wanted:
        agent = agent_get_enabled(slug=wanted)
        if agent is None:
            raise errors.invalid_body(errors.MSG_AGENT_UNKNOWN)
        return agent
    if conversation is not None and conversation.agent is not None and conversation.agent.enabled:
        return conversation.agent
    agent = agent_get_default()
    if agent is None:
        raise errors.ApiError(errors.MSG_NO_AGENT, code=GENERAL, status=503)
    return agent


def turn_begin(*, user, chat: ChatInput, request_id: str, slot_key: str = "") -> TurnStart:
    """Resolves the conversation (404 unless the caller's) and agent (with its enabled tools
    catalog), stores the user message with the turn's run row (run by this worker, holding the
    stream slot `slot_key`), and builds the history the model will see. One sync call from the
    stream view."""
    # The parser refuses text no database can hold; cleaning again costs nothing and keeps this
    # write safe whoever calls it.
    message, hint_domain = text_clean(chat.message), text_clean(chat.hint_domain)
    conversation = None
    if chat.conversation_id is not None:
        conversation = conversation_get(user=user, conversation_id=chat.conversation_id)
        if conversation is None:
            raise errors.not_found()
    agent = agent_catalog_load(agent=_agent_for(wanted=chat.agent, conversation=conversation))
    new_conversation = conversation is None
    # A question asked while tool calls wait for approval ends that turn first (its calls are
    # stored as not run), so the new turn's history has no call without its result.
    closed = () if new_conversation else tuple(paused_runs_close(conversation_id=conversation.id))
    with transaction.atomic():
        if new_conversation:
            conversation = Conversation.objects.create(
                user=user,
                agent=agent,
                title=conversation_title(first_message=message),
                hint_domain=hint_domain or "",
            )
        else:
            conversation.agent = agent
            if hint_domain is not None:
                conversation.hint_domain = hint_domain
            conversation.save(update_fields=["agent", "hint_domain", "updated_at"])
        user_message = Message.objects.create(
            conversation=conversation, role=Message.Role.USER, content=message, request_id=request_id
        )
        run = Run.objects.create(
            conversation=conversation,
            user=user,
            worker=WORKER_ID,
            heartbeat_at=timezone.now(),
            request_id=request_id,
            agent_name=agent.name,
            slot_key=slot_key or "",
        )
    if new_conversation:  # nothing before the question: no need to read it back
        history = [{"role": "user", "content": user_message.content}]
    else:
        history = history_build(conversation=conversation, limit=settings.MAX_HISTORY)
    return TurnStart(
        run=run,
        agent=agent,
        history=history,
        user_message_id=user_message.id,
        hint_domain=conversation.hint_domain or None,
        closed_runs=closed,
    )


def turn_store(
    *, conversation_id: uuid.UUID, final_message_id: uuid.UUID, rows: list[RowSpec], agent_name: str, request_id: str
) -> None:
    """Stores what a run produced in one transaction and touches the conversation.

    The rows share one timestamp and get increasing `seq`, so their order survives any clock.
    The final assistant row takes `final_message_id`, the id the stream announced up front.
    Their text is made valid here too (`text_clean`; the runtime's events already are): the
    model's and the sub-agents' output is not ours to refuse, and one lone surrogate or NUL
    that the database cannot hold would lose the whole reply.
    """
    now = timezone.now()
    messages = [
        Message(
            id=final_message_id if spec.is_final else uuid.uuid4(),
            conversation_id=conversation_id,
            role=spec.role,
            content=text_clean(spec.content),
            meta=text_clean(spec.meta),
            chart=text_clean(spec.chart),
            agent_name=agent_name if spec.role == Message.Role.ASSISTANT else "",
            request_id=request_id,
            seq=position,
            **usage_columns(spec.meta.get("usage")),
        )
        for position, spec in enumerate(rows, start=1)
    ]
    with transaction.atomic():
        conversation = Conversation.objects.select_related("agent").filter(id=conversation_id).first()
        if conversation is None:
            return  # deleted by its owner while the answer streamed: nothing to attach the reply to
        for message, spec in zip(messages, rows, strict=True):
            if spec.is_final:
                turn_usage_record(conversation=conversation, final=message)
        Message.objects.bulk_create(messages)
        # auto_now_add stamps each row separately; one batch, one instant.
        Message.objects.filter(id__in=[m.id for m in messages]).update(created_at=now)
        Conversation.objects.filter(id=conversation_id).update(updated_at=now)
