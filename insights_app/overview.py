"""The admin's 运营概况 page (issue 25 point 5): today at a glance, cheap to open — a handful of
indexed queries (today's usage rollup, today's final replies, runs and approvals in progress),
the breakers from the cache, and the tool timings from this host's metrics (all its workers with
PROMETHEUS_MULTIPROC_DIR, since they started)."""
from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.db.models import Count, F, Sum
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from agents_app.metrics import breaker_states
from campus_agent.base.metrics import metrics_text
from chat_app.models import Message, Run, Wait
from insights_app.models import UsageDaily

SLOWEST_SHOWN = 8
QUOTA_USERS_SHOWN = 10


@dataclass(frozen=True)
class ToolTiming:
    tool: str
    kind: str
    calls: int
    mean_sec: float


def tool_timings() -> list[ToolTiming]:
    """Tools by their mean call time, slowest first (from campus_agent_tool_call_seconds)."""
    sums: dict[tuple, float] = {}
    counts: dict[tuple, float] = {}
    for family in text_string_to_metric_families(metrics_text().decode()):
        if family.name != "campus_agent_tool_call_seconds":
            continue
        for sample in family.samples:
            key = (sample.labels.get("tool", ""), sample.labels.get("kind", ""))
            if sample.name.endswith("_sum"):
                sums[key] = sums.get(key, 0.0) + sample.value
            elif sample.name.endswith("_count"):
                counts[key] = counts.get(key, 0.0) + sample.value
    timings = [ToolTiming(tool, kind, int(n), sums.get((tool, kind), 0.0) / n) for (tool, kind), n in counts.items() if n]
    return sorted(timings, key=lambda t: t.mean_sec, reverse=True)[:SLOWEST_SHOWN]


def overview_today() -> dict:
    today = timezone.localdate()
    start = timezone.make_aware(timezone.datetime.combine(today, timezone.datetime.min.time()))
    usage = UsageDaily.objects.filter(day=today)
    totals = usage.aggregate(turns=Sum("turns"), fallback=Sum("fallback_turns"), users=Count("user", distinct=True),
                             tokens=Sum(F("prompt_tokens") + F("completion_tokens")))
    finals = Message.objects.filter(role=Message.Role.ASSISTANT, created_at__gte=start).exclude(meta__has_key="tool_calls")
    replies = finals.count()
    interrupted = finals.filter(meta__has_key="interrupted").count()
    quota = settings.USER_DAILY_TOKEN_QUOTA
    top = (usage.values("username").annotate(tokens=Sum(F("prompt_tokens") + F("completion_tokens")), turns=Sum("turns"))
           .order_by("-tokens")[:QUOTA_USERS_SHOWN])
    return {
        "day": today,
        "turns": totals["turns"] or 0,
        "fallback_turns": totals["fallback"] or 0,
        "users": totals["users"] or 0,
        "tokens": totals["tokens"] or 0,
        "replies": replies,
        "interrupted": interrupted,
        "error_rate": (interrupted / replies) if replies else None,
        "running": Run.objects.filter(status=Run.Status.RUNNING).count(),
        "waiting": Wait.objects.filter(status=Wait.Status.PENDING).count(),
        "breakers": [b for b in breaker_states() if b["state"] != "closed"],
        "slowest": tool_timings(),
        "quota": quota,
        "top_users": [{**row, "share": (row["tokens"] / quota) if quota else None} for row in top],
    }
