"""Checking a personal API key (docs/design.md#other-clients) on every request that carries one; making and
revoking them is chat_app.accounts.api_keys.

A key is `cak_` + 32 URL-safe characters (192 random bits): the prefix lets a leak scanner (and a
person) recognise one. Only its SHA-256 is stored, looked up by that digest. A key is checked
against its row on every request, on every worker: a revoked or expired key is refused at once
everywhere, with or without Redis, for one indexed read. `last_used_at` is written at most once
a minute per key, not on every request.
"""
from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from audit_app.chain import Event, audit_record
from campus_agent.base import errors
from campus_agent.base.text import label_clean
from chat_app.models import ApiKey, AuthSession

KEY_PREFIX = "cak_"
KEY_LENGTH = len(KEY_PREFIX) + 32
LAST_USED_EVERY = timedelta(minutes=1)


def looks_like_api_key(token: str) -> bool:
    return token.startswith(KEY_PREFIX)


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def api_key_resolve(*, token: str) -> ApiKey | None:
    """The live key `token` is (its user active), else None. One query (and, at most once a
    minute, the `last_used_at` write)."""
    if len(token) != KEY_LENGTH or not looks_like_api_key(token):
        return None
    now = timezone.now()
    key = (
        ApiKey.objects.select_related("user")
        .filter(key_hash=key_digest(token), revoked_at__isnull=True, user__is_active=True)
        .first()
    )
    if key is None or (key.expires_at is not None and key.expires_at <= now):
        return None
    if key.last_used_at is None or now - key.last_used_at > LAST_USED_EVERY:
        ApiKey.objects.filter(id=key.id).update(last_used_at=now)
        key.last_used_at = now
    return key


def api_key_campus_token(*, user) -> str | None:
    """A key carries no campus token. A sub-agent that needs one gets the user's latest live login
    session's (a password login has none; an SSO one does): what the same student would send from
    the page or the app right now. Without one, such a sub-agent answers 40102 and the client is
    told to log in on the page (docs/clients.md)."""
    session = (
        AuthSession.objects.filter(user=user, expires_at__gt=timezone.now())
        .exclude(campus_token="")
        .order_by("-created_at")
        .only("campus_token")
        .first()
    )
    return session.campus_token if session is not None else None


# --- made, listed and revoked by their user ------------------------------------------------

_SECRET_BYTES = 24  # 32 URL-safe characters
PREFIX_SHOWN = len(KEY_PREFIX) + 6
NAME_MAX = 64

MSG_KEY_NAME = _("name：请填写 1–64 个字符的名称。")
MSG_KEY_EXPIRES = _("expires_at：请填写一个将来的时间（ISO 8601），最长一年；留空表示不过期。")
MSG_KEYS_TOO_MANY = _("API 密钥已达上限（{limit} 个），请先吊销不用的密钥。")
EXPIRES_MAX = timedelta(days=366)


def api_key_name_clean(value) -> str:
    """The name as shown (campus_agent.base.text.label_clean: nothing that misleads its reader).
    Raises ApiError 400 unless it is then 1–64 characters."""
    name = label_clean(value) if isinstance(value, str) else ""
    if not name or len(name) > NAME_MAX:
        raise errors.invalid_body(MSG_KEY_NAME)
    return name


def api_key_expiry_clean(value) -> datetime | None:
    """None (never), or a future moment within a year. Raises ApiError 400."""
    if value is None:
        return None
    from django.utils.dateparse import parse_datetime

    try:
        moment = parse_datetime(value) if isinstance(value, str) and len(value) <= 40 else None
    except ValueError:
        moment = None
    if moment is None:
        raise errors.invalid_body(MSG_KEY_EXPIRES)
    if timezone.is_naive(moment):
        moment = timezone.make_aware(moment)
    now = timezone.now()
    if moment <= now or moment - now > EXPIRES_MAX:
        raise errors.invalid_body(MSG_KEY_EXPIRES)
    return moment


def _key_audited(*, event: str, key: ApiKey, request, actor=None) -> None:
    audit_record(event=event, request=request, actor=actor or key.user, target=f"{key.prefix}…",
                 details={"key_id": str(key.id), "name": key.name, "owner": key.user.get_username(),
                          "expires_at": key.expires_at.isoformat() if key.expires_at else None})


def api_key_create(*, user, name: str, expires_at: datetime | None = None, request=None) -> tuple[ApiKey, str]:
    """A new key for `user`: the row and the secret (shown once, never stored), audited with
    `request`'s address. Raises ApiError 429-free 400 when the user already holds
    API_KEYS_PER_USER_MAX live keys."""
    limit = settings.API_KEYS_PER_USER_MAX
    with transaction.atomic():
        live = ApiKey.objects.select_for_update().filter(user=user, revoked_at__isnull=True)
        if live.count() >= limit:
            raise errors.ApiError(MSG_KEYS_TOO_MANY.format(limit=limit), code=errors.INVALID_BODY, status=400)
        secret = KEY_PREFIX + secrets.token_urlsafe(_SECRET_BYTES)
        key = ApiKey.objects.create(user=user, name=name, prefix=secret[:PREFIX_SHOWN], key_hash=key_digest(secret),
                                    expires_at=expires_at)
        _key_audited(event=Event.API_KEY_CREATED, key=key, request=request)
    return key, secret


def api_key_revoke(*, user, key_id, request=None) -> ApiKey | None:
    """Revokes one of `user`'s keys (at once, on every worker); None when it is not theirs.
    Revoking a revoked key changes nothing (and records nothing)."""
    key = ApiKey.objects.filter(id=key_id, user=user).first()
    if key is None:
        return None
    if key.revoked_at is None:
        with transaction.atomic():
            if ApiKey.objects.filter(id=key.id, revoked_at__isnull=True).update(revoked_at=timezone.now()):
                _key_audited(event=Event.API_KEY_REVOKED, key=key, request=request)
        key.refresh_from_db()
    return key


def api_keys_revoke_by_staff(*, queryset, request) -> int:
    """Revokes the live keys of `queryset` (the admin's action), one audit row each, by the staff
    member of `request`."""
    now = timezone.now()
    with transaction.atomic():
        keys = list(queryset.filter(revoked_at__isnull=True).select_related("user").select_for_update(of=("self",)))
        ApiKey.objects.filter(id__in=[key.id for key in keys]).update(revoked_at=now)
        for key in keys:
            _key_audited(event=Event.API_KEY_REVOKED, key=key, request=request, actor=request.user)
    return len(keys)


def api_keys_of(user):
    return ApiKey.objects.filter(user=user).order_by("-created_at")
