"""Personal API keys (DESIGN §4b): made, listed and revoked by their user.

The key's shape, its digest and the check on every request are chat_app.api_keys.
"""
from __future__ import annotations

import secrets
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from chat_app import api_errors as errors
from chat_app.api_keys import KEY_PREFIX, key_digest
from chat_app.models import ApiKey

_SECRET_BYTES = 24  # 32 URL-safe characters
PREFIX_SHOWN = len(KEY_PREFIX) + 6
NAME_MAX = 64

MSG_KEY_NAME = _("name：请填写 1–64 个字符的名称。")
MSG_KEY_EXPIRES = _("expires_at：请填写一个将来的时间（ISO 8601），最长一年；留空表示不过期。")
MSG_KEYS_TOO_MANY = _("API 密钥已达上限（{limit} 个），请先吊销不用的密钥。")
EXPIRES_MAX = timedelta(days=366)


def api_key_name_clean(value) -> str:
    """Raises ApiError 400 unless `value` is a 1–64 character name (no control characters)."""
    if not isinstance(value, str) or not value.strip() or len(value.strip()) > NAME_MAX:
        raise errors.invalid_body(MSG_KEY_NAME)
    name = value.strip()
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
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


def api_key_create(*, user, name: str, expires_at: datetime | None = None) -> tuple[ApiKey, str]:
    """A new key for `user`: the row and the secret (shown once, never stored). Raises ApiError
    429-free 400 when the user already holds API_KEYS_PER_USER_MAX live keys."""
    limit = settings.API_KEYS_PER_USER_MAX
    with transaction.atomic():
        live = ApiKey.objects.select_for_update().filter(user=user, revoked_at__isnull=True)
        if live.count() >= limit:
            raise errors.ApiError(MSG_KEYS_TOO_MANY.format(limit=limit), code=errors.INVALID_BODY, status=400)
        secret = KEY_PREFIX + secrets.token_urlsafe(_SECRET_BYTES)
        key = ApiKey.objects.create(user=user, name=name, prefix=secret[:PREFIX_SHOWN], key_hash=key_digest(secret),
                                    expires_at=expires_at)
    return key, secret


def api_key_revoke(*, user, key_id) -> ApiKey | None:
    """Revokes one of `user`'s keys (at once, on every worker); None when it is not theirs.
    Revoking a revoked key changes nothing."""
    key = ApiKey.objects.filter(id=key_id, user=user).first()
    if key is None:
        return None
    if key.revoked_at is None:
        ApiKey.objects.filter(id=key.id, revoked_at__isnull=True).update(revoked_at=timezone.now())
        key.refresh_from_db()
    return key


def api_keys_of(user):
    return ApiKey.objects.filter(user=user).order_by("-created_at")
