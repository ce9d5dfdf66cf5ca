"""Writes on conversations outside a chat turn."""
from loguru import logger

from chat_app.models import Conversation


def conversation_delete(*, conversation: Conversation) -> None:
    """Deletes the conversation and its messages (cascade)."""
    conversation_id = conversation.id
    conversation.delete()
    logger.info("conversation deleted id={}", conversation_id)
