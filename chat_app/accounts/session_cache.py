"""The chat stream's JWT check without the database, for a few seconds (issue #11).

A JWT names an AuthSession row, and deleting that row revokes it (docs/design.md#cross-cutting-rules): so every request
used to read the row (and its user) before anything else. The chat stream remembers, per token,
the session it found valid for AUTH_SESSION_CACHE_SEC (5 s by default; never past the JWT's
`exp` or the row's `expires_at`), in this process's memory. What that costs:

- a revocation made in this process (logout, admin deleting the row, a password change saved
  through the ORM) is seen at once: the signals below forget the token;
- one made elsewhere (another worker, a bulk `update()`, a shell) is seen within
  AUTH_SESSION_CACHE_SEC: a stream may start up to that long after the row was deleted.

Only the chat stream reads this; the REST endpoints still read the row on every request.
"""
import threading
import time

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models.signals import post_delete, post_save
from django.utils import timezone

from chat_app.models import AuthSession

MAX_ENTRIES = 10_000  # tokens remembered at most; past it the memory starts over
_entries: dict[str, tuple[float, AuthSession]] = {}  # token → (valid until, monotonic; session)
_lock = threading.Lock()
_clock = time.monotonic  # what the tests move forward


def auth_session_cached(*, token: str) -> AuthSession | None:
    """The session this token named when it was checked less than AUTH_SESSION_CACHE_SEC ago."""
    entry = _entries.get(token)
    if entry is None:
        return None
    if _clock() >= entry[0]:
        with _lock:
            _entries.pop(token, None)
        return None
    return entry[1]


def auth_session_remember(*, token: str, session: AuthSession, token_exp: int) -> None:
    """Remembers a session just read from the database as valid for `token`."""
    ttl = min(
        float(settings.AUTH_SESSION_CACHE_SEC),
        token_exp - time.time(),
        (session.expires_at - timezone.now()).total_seconds(),
    )
    if ttl <= 0:
        return
    with _lock:
        if len(_entries) >= MAX_ENTRIES:
            _entries.clear()
        _entries[token] = (_clock() + ttl, session)


def _forget(matches) -> None:
    with _lock:
        for token in [token for token, (_, session) in _entries.items() if matches(session)]:
            del _entries[token]


def auth_cache_clear() -> None:
    with _lock:
        _entries.clear()


def _session_deleted(sender, instance, **kwargs) -> None:
    _forget(lambda session: session.pk == instance.pk)


def _user_saved(sender, instance, **kwargs) -> None:
    # A password change or deactivation revokes the user's tokens (auth_session_get_valid);
    # any save of the user is rare enough to simply forget their tokens.
    _forget(lambda session: session.user_id == instance.pk)


post_delete.connect(_session_deleted, sender=AuthSession, dispatch_uid="auth_cache_session_deleted")
post_save.connect(_user_saved, sender=get_user_model(), dispatch_uid="auth_cache_user_saved")
