"""Personal API keys (docs/design.md#other-clients, issue 22): made once, listed without their secret, accepted as
`Bearer` wherever a JWT is (REST and the chat stream), refused at once when revoked or expired,
never able to manage keys, stored as a digest only."""
import hashlib
from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from chat_app.accounts.api_keys import KEY_LENGTH, KEY_PREFIX, api_key_create
from chat_app.models import ApiKey, Conversation, Message
from testkit.web.sse import chat

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(auth_headers):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=auth_headers["Authorization"])
    return client


def _bearer(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


def _make(api, name="Cherry Studio", **extra) -> dict:
    answer = api.post("/api/v1/api-keys", {"name": name, **extra}, format="json")
    assert answer.status_code == 201, answer.content
    return answer.json()


def test_a_key_is_shown_once_stored_as_a_digest_and_listed_without_its_secret(api, user):
    made = _make(api)
    key = made["key"]
    assert key.startswith(KEY_PREFIX) and len(key) == KEY_LENGTH
    assert set(made) == {"id", "name", "prefix", "created_at", "last_used_at", "expires_at", "key"}
    assert key.startswith(made["prefix"]) and made["name"] == "Cherry Studio"
    row = ApiKey.objects.get(id=made["id"])
    assert row.user == user and row.key_hash == hashlib.sha256(key.encode()).hexdigest()
    assert key not in repr(row) and key not in str(row)
    listed = api.get("/api/v1/api-keys").json()
    assert [k["id"] for k in listed] == [made["id"]] and "key" not in listed[0]
    assert key not in api.get("/api/v1/api-keys").content.decode()


def test_a_key_acts_as_its_user_and_is_refused_at_once_when_revoked(api, user, other_user, token_for):
    Conversation.objects.create(user=user, title="我的")
    Conversation.objects.create(user=other_user, title="别人的")
    made = _make(api)
    by_key = _bearer(made["key"])
    answer = by_key.get("/api/v1/conversations")
    assert answer.status_code == 200 and [c["title"] for c in answer.json()["results"]] == ["我的"]
    assert ApiKey.objects.get(id=made["id"]).last_used_at is not None

    theirs = _bearer(token_for(other_user))
    assert theirs.delete(f"/api/v1/api-keys/{made['id']}").status_code == 404  # not theirs: not found
    assert by_key.get("/api/v1/conversations").status_code == 200
    assert api.delete(f"/api/v1/api-keys/{made['id']}").status_code == 204
    refused = by_key.get("/api/v1/conversations")
    assert refused.status_code == 401 and refused.json()["code"] == 40101
    assert refused["WWW-Authenticate"] == "Bearer"
    assert api.get("/api/v1/api-keys").json() == []
    assert api.delete(f"/api/v1/api-keys/{made['id']}").status_code == 204  # again: nothing changes


def test_a_key_cannot_manage_keys_nor_log_out(api):
    by_key = _bearer(_make(api)["key"])
    for answer in (by_key.get("/api/v1/api-keys"), by_key.post("/api/v1/api-keys", {"name": "x"}, format="json")):
        assert answer.status_code == 403 and "API 密钥" in answer.json()["message"]
    assert ApiKey.objects.count() == 1
    assert by_key.post("/api/v1/auth/logout").status_code == 400


def test_an_expired_key_is_refused(api):
    made = _make(api, expires_at=(timezone.now() + timedelta(days=1)).isoformat())
    by_key = _bearer(made["key"])
    assert by_key.get("/api/v1/conversations").status_code == 200
    ApiKey.objects.filter(id=made["id"]).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert by_key.get("/api/v1/conversations").status_code == 401


@pytest.mark.parametrize(
    "key",
    ["cak_", "cak_" + "A" * 32, "cak_" + "A" * 10_000, "cak_\u202e" + "A" * 31, "sk-" + "A" * 48, "cak_ " * 5],
)
def test_wrong_and_hostile_keys_are_401(key):
    answer = _bearer(key).get("/api/v1/conversations")
    assert answer.status_code == 401 and answer.json()["code"] == 40101


@pytest.mark.parametrize(
    "body",
    [{}, {"name": ""}, {"name": "  "}, {"name": "x" * 65}, {"name": 5}, {"name": ["a"]},
     # nothing but invisible characters ("a\nb" is named "a b": test_hostile_labels.py)
     {"name": "\u202e\u200b\n"}, {"name": "\x00"}, {"name": "ok", "expires_at": "yesterday"}, {"name": "ok", "expires_at": "2001-01-01T00:00:00Z"},
     {"name": "ok", "expires_at": "2999-01-01T00:00:00Z"}, {"name": "ok", "expires_at": 5}, [1, 2]],
)
def test_bad_bodies_are_400_and_make_no_key(api, body):
    answer = api.post("/api/v1/api-keys", body, format="json")
    assert answer.status_code == 400, answer.content
    assert ApiKey.objects.count() == 0


def test_a_user_holds_at_most_the_limit_of_live_keys(api, settings):
    settings.API_KEYS_PER_USER_MAX = 2
    first = _make(api, "a")
    _make(api, "b")
    assert api.post("/api/v1/api-keys", {"name": "c"}, format="json").status_code == 400
    api.delete(f"/api/v1/api-keys/{first['id']}")
    _make(api, "c")  # a revoked key frees its place


def test_without_a_login_nothing_is_shown():
    assert APIClient().get("/api/v1/api-keys").status_code == 401


@pytest.mark.django_db(transaction=True)
def test_the_chat_stream_takes_a_key_and_lends_the_users_live_campus_token(live_asgi, llm_settings, agent, user,
                                                                          token_for, subagent_server):
    token_for(user, campus_token="campus-abc")  # the student is logged in with SSO somewhere
    _, key = api_key_create(user=user, name="app")
    llm_settings.reply_tool_calls(("call_canteen", {"message": "吃啥"}))
    llm_settings.reply_text("一食堂。")
    result = chat(live_asgi, {"message": "今天吃啥"}, headers={"Authorization": f"Bearer {key}"})
    assert result.status == 200 and result.frames[-1]["full_text"] == "一食堂。"
    assert subagent_server.requests[-1].headers["authorization"] == "Bearer campus-abc"
    conversation = Conversation.objects.get(id=result.frames[0]["conversation_id"])
    assert conversation.user == user
    assert Message.objects.filter(conversation=conversation, role="user").get().content == "今天吃啥"


def test_staff_list_keys_without_their_secret_and_revoke_them(client, staff_user, user):
    key, secret = api_key_create(user=user, name="手机 App")
    client.force_login(staff_user)
    page = client.get("/admin/chat_app/apikey/")
    html = page.content.decode()
    assert page.status_code == 200 and f"{key.prefix}…" in html and "手机 App" in html
    assert secret not in html and key.key_hash not in html
    detail = client.get(f"/admin/chat_app/apikey/{key.id}/change/").content.decode()
    assert secret not in detail and key.key_hash not in detail
    assert client.get("/admin/chat_app/apikey/add/").status_code == 403
    answer = client.post("/admin/chat_app/apikey/", {"action": "revoke", "_selected_action": [str(key.id)]})
    assert answer.status_code == 302
    assert _bearer(secret).get("/api/v1/conversations").status_code == 401
    key.refresh_from_db()
    assert key.revoked_at is not None
