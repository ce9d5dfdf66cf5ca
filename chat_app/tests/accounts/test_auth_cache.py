"""The chat stream remembers a checked JWT session for AUTH_SESSION_CACHE_SEC (chat_app/accounts/session_cache.py):
a revocation made in this process is seen at once, one made elsewhere within that time."""
from datetime import timedelta

import pytest
from django.utils import timezone

from chat_app.accounts import session_cache as auth_cache
from chat_app.models import AuthSession
from testkit.web.sse import chat

pytestmark = pytest.mark.django_db(transaction=True)


class _Clock:
    """auth_cache's monotonic clock, moved by the test instead of waited for."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    auth_cache.auth_cache_clear()
    fake = _Clock()
    monkeypatch.setattr(auth_cache, "_clock", fake)
    yield fake
    auth_cache.auth_cache_clear()


def _status(live_asgi, headers) -> int:
    return chat(live_asgi, {"message": "在吗"}, headers=headers).status


def test_a_revocation_made_elsewhere_reaches_the_stream_within_the_cache_time(
    live_asgi, llm_settings, agent, user, auth_headers, clock, settings
):
    settings.AUTH_SESSION_CACHE_SEC = 5
    llm_settings.reply_text("在的。")
    llm_settings.reply_text("还在。")
    assert _status(live_asgi, auth_headers) == 200  # checked in the database, then remembered
    # What another worker's logout or a bulk update looks like here: no signal in this process.
    AuthSession.objects.filter(user=user).update(expires_at=timezone.now() - timedelta(seconds=1))
    clock.now += 4.9
    assert _status(live_asgi, auth_headers) == 200  # still within AUTH_SESSION_CACHE_SEC
    clock.now += 0.2
    assert _status(live_asgi, auth_headers) == 401  # past it: read again, revoked


def test_a_revocation_in_this_process_is_seen_at_once(live_asgi, llm_settings, agent, user, auth_headers, clock):
    llm_settings.reply_text("在的。")
    assert _status(live_asgi, auth_headers) == 200
    AuthSession.objects.filter(user=user).delete()  # logout, admin: post_delete forgets the token
    assert _status(live_asgi, auth_headers) == 401


def test_a_password_change_in_this_process_is_seen_at_once(live_asgi, llm_settings, agent, user, auth_headers, clock):
    llm_settings.reply_text("在的。")
    assert _status(live_asgi, auth_headers) == 200
    user.set_password("a-new-Pass-2024!")
    user.save()
    assert _status(live_asgi, auth_headers) == 401


def test_zero_turns_the_memory_off(live_asgi, llm_settings, agent, user, auth_headers, clock, settings):
    settings.AUTH_SESSION_CACHE_SEC = 0
    llm_settings.reply_text("在的。")
    assert _status(live_asgi, auth_headers) == 200
    AuthSession.objects.filter(user=user).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert _status(live_asgi, auth_headers) == 401
