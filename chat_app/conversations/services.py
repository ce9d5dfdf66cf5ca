"""Writes on conversations outside a chat turn: delete, rename, setting the last turn aside."""
from django.db import transaction
from django.db.models import Q
from loguru import logger

from chat_app.conversations.selectors import conversation_find_by_history
from chat_app.models import Conversation, Message, Run


class TurnBusy(Exception):
    """An answer is still being written in the conversation."""


class NoTurn(Exception):
    """The conversation has no question to set aside."""


def conversation_delete(*, conversation: Conversation) -> None:
    """Deletes the conversation and its messages (cascade)."""
    conversation_id = conversation.id
    conversation.delete()
    logger.info("conversation deleted id={}", conversation_id)


def conversation_rename(*, conversation: Conversation, title: str) -> Conversation:
    """Sets the title (already validated). `updated_at` is left alone: the list is ordered by
    the last exchange, and renaming is not one."""
    Conversation.objects.filter(id=conversation.id).update(title=title)
    conversation.title = title
    logger.info("conversation renamed id={}", conversation.id)
    return conversation


def last_turn_supersede(*, conversation: Conversation) -> Message:
    """Marks the last live turn (its question and every row after it) `superseded` and returns
    its question row, before regenerate or edit-and-resend start a new run with `POST /chat`.

    The rows stay: the page shows them as an earlier version of the turn that follows; the model
    no longer sees them (history_build skips them). Raises TurnBusy while a run is active (its
    rows are not all stored yet), NoTurn when there is no question.
    """
    with transaction.atomic():
        # Serialises two set-asides of one conversation (PostgreSQL; SQLite locks the whole file).
        Conversation.objects.select_for_update().filter(id=conversation.id).first()
        if Run.objects.filter(conversation=conversation, status__in=Run.ACTIVE).exists():
            raise TurnBusy()
        live = Message.objects.filter(conversation=conversation, superseded=False)
        question = live.filter(role=Message.Role.USER).order_by("-created_at", "-seq").first()
        if question is None:
            raise NoTurn()
        live.filter(
            Q(created_at__gt=question.created_at) | Q(created_at=question.created_at, seq__gte=question.seq)
        ).update(superseded=True)
    logger.info("last turn superseded conversation={} question={}", conversation.id, question.id)
    question.superseded = True
    return question


def conversation_for_client_history(*, user, questions: list[str], answers: list[str], question: str):
    """The id of the conversation a client's own history continues (the OpenAI-compatible API,
    docs/clients.md; None: a new one). When the client asks that conversation's last question
    again (its "regenerate"), the last turn is set aside first, as the page's regenerate does, so
    that the model answers it afresh."""
    match = conversation_find_by_history(user=user, questions=questions, answers=answers, question=question)
    if match is None:
        return None
    if match.asked_again:
        try:
            last_turn_supersede(conversation=Conversation(id=match.conversation_id))
        except (TurnBusy, NoTurn):
            pass  # its answer is still being written: the question is asked after it
    return match.conversation_id
