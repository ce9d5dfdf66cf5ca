"""Token usage per turn, and the per-user daily token quota (USER_DAILY_TOKEN_QUOTA, 0 = off, or
the user's groups': chat_app.runs.group_limits).

When a turn's reply is stored (services/turns.py), `turn_usage_record` stamps its final row with
the model that answered and, once the transaction has committed:

- adds the turn's tokens (prompt + completion) to the user's counter of the day in the Django
  cache, which every worker shares when REDIS_URL is set (as chat_app.runs.lease counts). A counter
  the cache does not hold (first turn of the day, a cache restart) is seeded from the stored
  messages of the day;
- sends `turn_usage_recorded` with a `TurnUsage`: apps that report usage (insights_app keeps its
  daily rollup from it) listen, so chat_app knows none of them.

The quota is checked when a turn is admitted (services/admission.py): a user whose tokens of
today (local date, TIME_ZONE) reached it gets 429 until midnight. A turn is counted when it ends,
so the turns a user already has running can take them past the quota; CHAT_MAX_CONCURRENT_STREAMS
bounds by how much. Keyword-routed turns spend no tokens: they count as turns, not against it.
"""
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta

from django.core.cache import cache
from django.db import transaction
from django.db.models import Sum
from django.dispatch import Signal
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from campus_agent.base.errors import ApiError
from chat_app.models import Conversation, Message

QUOTA_EXCEEDED = 42904
MSG_QUOTA_EXCEEDED = _("今天的对话额度（{quota} tokens）已用完，明天 0 点后恢复。")
# A counter outlives its day a little, so a turn stored just after midnight never reseeds it.
COUNTER_GRACE_SEC = 3600

turn_usage_recorded = Signal()
"""Sent (after commit) once per stored turn with `usage=TurnUsage(...)`."""


@dataclass(frozen=True, slots=True)
class TurnUsage:
    user_id: int
    agent_name: str
    model: str  # "" when keyword routing answered
    day: date  # local date the turn was stored
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    fallback: bool  # answered by keyword routing
    interrupted: bool
    provider: str = ""  # the model provider that answered ("" for keyword routing)

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def _counter_key(user_id: int, day: date) -> str:
    return f"chat:tokens:{user_id}:{day.isoformat()}"


def _seconds_to_midnight() -> int:
    now = timezone.localtime()
    midnight = datetime.combine(now.date() + timedelta(days=1), time.min, tzinfo=now.tzinfo)
    return max(1, int((midnight - now).total_seconds()))


def user_tokens_stored(*, user_id: int, day: date) -> int:
    """The tokens of the user's turns stored on `day` (local date), summed in the database."""
    start = datetime.combine(day, time.min, tzinfo=timezone.get_current_timezone())
    totals = Message.objects.filter(
        conversation__user_id=user_id,
        role=Message.Role.ASSISTANT,
        created_at__gte=start,
        created_at__lt=start + timedelta(days=1),
    ).aggregate(prompt=Sum("prompt_tokens"), completion=Sum("completion_tokens"))
    return (totals["prompt"] or 0) + (totals["completion"] or 0)


def _counter_seed(user_id: int, day: date) -> int:
    used = user_tokens_stored(user_id=user_id, day=day)
    cache.add(_counter_key(user_id, day), used, _seconds_to_midnight() + COUNTER_GRACE_SEC)
    return used


def user_tokens_today(*, user_id: int) -> int:
    """The tokens the user spent today, from the shared counter (seeded when missing)."""
    day = timezone.localdate()
    used = cache.get(_counter_key(user_id, day))
    return _counter_seed(user_id, day) if used is None else used


def user_token_quota_check(*, user_id: int, quota: int) -> None:
    """Raises 429 (QUOTA_EXCEEDED, Retry-After: the seconds to midnight) when the user's tokens
    of today reached `quota` (theirs: chat_app.runs.group_limits); nothing when it is 0 (none)."""
    if quota <= 0:
        return
    if user_tokens_today(user_id=user_id) >= quota:
        raise ApiError(
            MSG_QUOTA_EXCEEDED.format(quota=quota),
            code=QUOTA_EXCEEDED,
            status=429,
            headers={"Retry-After": str(_seconds_to_midnight())},
        )


def _tokens_count(usage: TurnUsage) -> None:
    # Counted whatever the global quota: a group may set one (chat_app.runs.group_limits).
    if not usage.tokens:
        return
    try:
        cache.incr(_counter_key(usage.user_id, usage.day), usage.tokens)
    except ValueError:  # no counter yet: the seed reads the stored rows, this turn's included
        _counter_seed(usage.user_id, usage.day)


def _meta_text(value, limit: int = 64) -> str:
    return value[:limit] if isinstance(value, str) else ""


def turn_usage_record(*, conversation: Conversation, final: Message) -> None:
    """Called by turn_store inside its transaction, before the final row is written: sets the
    row's model (the agent's, when the turn reported usage; "" for keyword routing) and counts
    the turn once the transaction commits."""
    fallback = bool(final.meta.get("fallback"))
    spent = final.prompt_tokens or final.completion_tokens
    if spent and not fallback and conversation.agent is not None:
        # The model that answered (a fallback provider's, when the agent's own was down).
        final.model = final.meta.get("model") or conversation.agent.effective_model
    usage = TurnUsage(
        user_id=conversation.user_id,
        agent_name=final.agent_name,
        model=final.model,
        day=timezone.localdate(),
        prompt_tokens=final.prompt_tokens,
        completion_tokens=final.completion_tokens,
        cached_tokens=final.cached_tokens,
        fallback=fallback,
        interrupted=bool(final.meta.get("interrupted")),
        provider=_meta_text(final.meta.get("provider")) if spent and not fallback else "",
    )

    def committed() -> None:
        _tokens_count(usage)
        turn_usage_recorded.send(sender=TurnUsage, usage=usage)

    # robust: a listener's failure is logged; it never undoes or fails the stored reply.
    transaction.on_commit(committed, robust=True)
