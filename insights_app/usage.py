"""Usage per user, agent and day: the rollup (UsageDaily) and the reads of the usage report.

Decision: a rollup table, kept as turns are stored, rather than a query over the messages. The
messages are deleted with their conversation (students may delete theirs), and what a day cost
must not change afterwards; the table is also small (one row per day, user, agent, provider and model),
so the report stays cheap whatever the message count. `usage_rollup_rebuild` recomputes it from
the messages (for turns stored before this existed, or after restoring a backup).
"""
import functools
from dataclasses import dataclass
from datetime import date

from django.contrib.auth import get_user_model
from django.db import IntegrityError, connection, transaction
from django.db.models import Count, F, Q, QuerySet, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone

from chat_app.models import Message
from chat_app.runs.quota import TurnUsage
from insights_app.models import UsageDaily

SUMMED = ("turns", "fallback_turns", "prompt_tokens", "completion_tokens", "cached_tokens")
TOP_USERS = 10


def usage_turn_add(*, usage: TurnUsage) -> None:
    """Adds one stored turn to its day's row (created at the first turn of the key)."""
    if connection.vendor in _UPSERT_VENDORS:
        _usage_upsert(usage)
        return
    users = get_user_model()
    key = {"day": usage.day, "user_id": usage.user_id, "agent_name": usage.agent_name, "provider": usage.provider,
           "model": usage.model}
    increments = {
        "turns": F("turns") + 1,
        "fallback_turns": F("fallback_turns") + int(usage.fallback),
        "prompt_tokens": F("prompt_tokens") + usage.prompt_tokens,
        "completion_tokens": F("completion_tokens") + usage.completion_tokens,
        "cached_tokens": F("cached_tokens") + usage.cached_tokens,
    }
    for _ in range(2):  # a second worker may create the row between our update and create
        with transaction.atomic():
            if UsageDaily.objects.filter(**key).update(**increments):
                return
            try:
                with transaction.atomic():
                    UsageDaily.objects.create(
                        **key,
                        username=users.objects.filter(pk=usage.user_id).values_list(users.USERNAME_FIELD,
                                                                                     flat=True).first() or "",
                        turns=1,
                        fallback_turns=int(usage.fallback),
                        prompt_tokens=usage.prompt_tokens,
                        completion_tokens=usage.completion_tokens,
                        cached_tokens=usage.cached_tokens,
                    )
                return
            except IntegrityError:
                continue


# SQLite and PostgreSQL add a turn in one statement, `INSERT … ON CONFLICT DO UPDATE`, whether the
# day's row exists or not: the ORM's update, then on a day's first turn a username read and an
# insert in a savepoint, cost 3.7-7.1 % of a worker's CPU through a burst of 1,000 turns
# (docs/benchmarks.md). Other databases take the ORM path above.
_UPSERT_VENDORS = ("sqlite", "postgresql")
_KEY = ("day", "user", "agent_name", "provider", "model")
_SUMMED_ADDED = ("fallback_turns", "prompt_tokens", "completion_tokens", "cached_tokens")


@functools.cache
def _upsert_sql(vendor: str) -> str:
    quote = connection.ops.quote_name
    column = {name: quote(UsageDaily._meta.get_field(name).column) for name in ("username", "turns", *_KEY,
                                                                                 *_SUMMED_ADDED)}
    users = get_user_model()
    username = (f"SELECT {quote(users._meta.get_field(users.USERNAME_FIELD).column)} "
                f"FROM {quote(users._meta.db_table)} WHERE {quote(users._meta.pk.column)} = %s")
    table = quote(UsageDaily._meta.db_table)
    key = ", ".join(column[name] for name in _KEY)
    added = ", ".join(f"{column[name]} = {table}.{column[name]} + EXCLUDED.{column[name]}" for name in _SUMMED_ADDED)
    return (
        f"INSERT INTO {table} ({key}, {column['username']}, {column['turns']}, "
        f"{', '.join(column[name] for name in _SUMMED_ADDED)}) "
        f"VALUES (%s, %s, %s, %s, %s, COALESCE(({username}), ''), 1, %s, %s, %s, %s) "
        f"ON CONFLICT ({key}) DO UPDATE SET {column['turns']} = {table}.{column['turns']} + 1, {added}"
    )


def _usage_upsert(usage: TurnUsage) -> None:
    day = UsageDaily._meta.get_field("day").get_db_prep_value(usage.day, connection)
    with connection.cursor() as cursor:
        cursor.execute(_upsert_sql(connection.vendor), [
            day, usage.user_id, usage.agent_name, usage.provider, usage.model, usage.user_id,
            int(usage.fallback), usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens,
        ])


def usage_rollup_rebuild(*, since: date | None = None) -> int:
    """Recomputes the rollup from the stored messages (from `since`, else all); returns the
    number of rows written. Days are local dates (TIME_ZONE), as the live rollup counts them."""
    finals = Message.objects.filter(role=Message.Role.ASSISTANT).exclude(meta__has_key="tool_calls")
    if since is not None:
        finals = finals.filter(created_at__date__gte=since)
    grouped = (
        finals.annotate(day=TruncDate("created_at", tzinfo=timezone.get_current_timezone()))
        .values("day", "conversation__user_id", "conversation__user__username", "agent_name", "meta__provider",
                "model")
        .annotate(
            turns=Count("id"),
            fallback_turns=Count("id", filter=Q(meta__has_key="fallback")),
            prompt=Sum("prompt_tokens"),
            completion=Sum("completion_tokens"),
            cached=Sum("cached_tokens"),
        )
    )
    rows = [
        UsageDaily(
            day=g["day"],
            user_id=g["conversation__user_id"],
            username=g["conversation__user__username"] or "",
            agent_name=g["agent_name"],
            model=g["model"],
            provider=g["meta__provider"][:64] if isinstance(g["meta__provider"], str) else "",
            turns=g["turns"],
            fallback_turns=g["fallback_turns"],
            prompt_tokens=g["prompt"] or 0,
            completion_tokens=g["completion"] or 0,
            cached_tokens=g["cached"] or 0,
        )
        for g in grouped
    ]
    with transaction.atomic():
        stale = UsageDaily.objects.all() if since is None else UsageDaily.objects.filter(day__gte=since)
        stale.delete()
        UsageDaily.objects.bulk_create(rows, batch_size=500)
    return len(rows)


@dataclass(frozen=True)
class UsageTotals:
    turns: int = 0
    fallback_turns: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def _sums() -> dict:
    return {name: Sum(name) for name in SUMMED}


def usage_totals(*, rows: QuerySet[UsageDaily]) -> UsageTotals:
    sums = rows.aggregate(**_sums())
    return UsageTotals(**{name: sums[name] or 0 for name in SUMMED})


def _grouped(rows: QuerySet[UsageDaily], *fields: str) -> list[dict]:
    grouped = rows.order_by().values(*fields).annotate(**_sums())
    result = [{**g, "total_tokens": (g["prompt_tokens"] or 0) + (g["completion_tokens"] or 0)} for g in grouped]
    return sorted(result, key=lambda g: (-g["total_tokens"], -g["turns"]))


def usage_top_users(*, rows: QuerySet[UsageDaily], limit: int = TOP_USERS) -> list[dict]:
    """The users who spent the most tokens in `rows` (then the most turns)."""
    return _grouped(rows, "user_id", "username")[:limit]


def usage_by_agent(*, rows: QuerySet[UsageDaily]) -> list[dict]:
    return _grouped(rows, "agent_name")


def usage_by_provider(*, rows: QuerySet[UsageDaily]) -> list[dict]:
    """Tokens per model provider (and model): a fallback provider's share shows here."""
    return _grouped(rows, "provider", "model")


def usage_by_day(*, rows: QuerySet[UsageDaily]) -> list[dict]:
    return sorted(_grouped(rows, "day"), key=lambda g: g["day"], reverse=True)
