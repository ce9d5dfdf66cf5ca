"""What a caller's groups decide for a turn (docs/design.md#campus-identity-and-audit): which agents
and tools they may use (agents_app.access's Audience) and their limits — the daily token quota and
the message rate — read together in one query at admission.

A group may set its own quota and rate (`GroupLimits`, in admin); a group without a value counts as
the global setting (USER_DAILY_TOKEN_QUOTA, CHAT_RATE_PER_MINUTE). A user's limit is the most
generous of their groups' (a quota of 0 is none at all); a user in no group has the global ones.
The most generous, because a group raises what its members need (教职工 asks more than 本科生) and
a member of two groups should not lose what either gives them.
"""
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.models import Group

from agents_app.access import Audience, audience_of_groups


@dataclass(frozen=True, slots=True)
class UserLimits:
    daily_token_quota: int  # 0: none
    chat_rate_per_minute: int


def _limits(rows: list[tuple[int | None, int | None]]) -> UserLimits:
    quotas = [settings.USER_DAILY_TOKEN_QUOTA if quota is None else quota for quota, _ in rows] or \
        [settings.USER_DAILY_TOKEN_QUOTA]
    rates = [settings.CHAT_RATE_PER_MINUTE if rate is None else rate for _, rate in rows] or \
        [settings.CHAT_RATE_PER_MINUTE]
    return UserLimits(daily_token_quota=0 if 0 in quotas else max(quotas), chat_rate_per_minute=max(rates))


def caller_standing(*, user) -> tuple[Audience, UserLimits]:
    """The user's audience and limits, from one query of their groups (with each one's limits)."""
    rows = list(Group.objects.filter(user=user).values_list(
        "id", "chat_limits__daily_token_quota", "chat_limits__chat_rate_per_minute"))
    audience = audience_of_groups(group_ids=frozenset(row[0] for row in rows), superuser=user.is_superuser)
    return audience, _limits([row[1:] for row in rows])


def user_limits(*, user_id: int) -> UserLimits:
    """The user's limits (a run that resumes: its audience is read with its agent)."""
    return _limits(list(Group.objects.filter(user__id=user_id).values_list(
        "chat_limits__daily_token_quota", "chat_limits__chat_rate_per_minute")))
