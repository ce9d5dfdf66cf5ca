"""The rows writer: what a run produced, stored in one transaction (DESIGN §3, §4)."""
import uuid

from django.db import transaction
from django.utils import timezone

from campus_agent.base.text import text_clean
from chat_app.models import Conversation, Message
from chat_app.quota import turn_usage_record
from chat_app.services.recording import RowSpec, usage_columns


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
    # No savepoint when the caller's transaction is open (run_finish, run_rows_store): nothing
    # between them catches a failure, so it undoes the whole transaction either way, and a
    # savepoint is two more statements per store.
    with transaction.atomic(savepoint=False):
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
