"""Checking a personal API key (DESIGN §4b) on every request that carries one; making and
revoking them is chat_app.services.api_keys.

A key is `cak_` + 32 URL-safe characters (192 random bits): the prefix lets a leak scanner (and a
person) recognise one. Only its SHA-256 is stored, looked up by that digest. A key is checked
against its row on every request, on every worker: a revoked or expired key is refused at once
everywhere, with or without Redis, for one indexed read. `last_used_at` is written at most once
a minute per key, not on every request.
"""
from __future__ import annotations

import hashlib
from datetime import timedelta

from django.utils import timezone

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
