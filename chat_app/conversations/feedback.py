"""Writes of answer feedback (thumbs up / down with an optional comment)."""
from loguru import logger

from chat_app.models import Feedback, Message


def feedback_set(*, user, message: Message, rating: str, comment: str) -> Feedback:
    """One rating per user and answer: a second one replaces the first."""
    feedback, _ = Feedback.objects.update_or_create(
        message=message, user=user, defaults={"rating": rating, "comment": comment}
    )
    logger.info("feedback {} on message={} user={}", rating, message.id, user.pk)
    return feedback


def feedback_clear(*, user, message: Message) -> None:
    Feedback.objects.filter(message=message, user=user).delete()
