"""The per-user daily token quota (USER_DAILY_TOKEN_QUOTA): 429 with a Chinese message once a
user's stored turns of today reach it, counted in the shared cache and seeded from the stored
messages (so a worker with an empty cache refuses too); and the usage columns of a turn."""
import pytest
from django.core.cache import cache

from chat_app.models import Message
from chat_app.runs.quota import MSG_QUOTA_EXCEEDED, QUOTA_EXCEEDED, user_tokens_today
from chat_app.runs.recording import usage_columns
from testkit.web.sse import chat

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.embedded]

SPENT = {"prompt_tokens": 20, "completion_tokens": 15, "total_tokens": 35}


def test_quota_refuses_with_429_until_midnight(live_asgi, settings, llm_settings, agent, auth_headers, user,
                                               other_user, token_for):
    settings.USER_DAILY_TOKEN_QUOTA = 30
    llm_settings.reply_text("一食堂有红烧肉。", usage=SPENT)
    assert chat(live_asgi, {"message": "今天吃啥"}, headers=auth_headers).types[-1] == "done"
    assert user_tokens_today(user_id=user.pk) == 35

    refused = chat(live_asgi, {"message": "再问一个"}, headers=auth_headers)
    assert refused.status == 429
    assert refused.body_json == {"code": QUOTA_EXCEEDED, "message": MSG_QUOTA_EXCEEDED.format(quota=30)}
    assert refused.body_json["message"] == "今天的对话额度（30 tokens）已用完，明天 0 点后恢复。"
    assert 0 < int(refused.headers["retry-after"]) <= 24 * 3600
    assert not Message.objects.filter(content="再问一个").exists()  # refused before anything is stored

    # Another worker (an empty cache of its own, or a restarted Redis) counts from the stored turns.
    cache.clear()
    assert chat(live_asgi, {"message": "换个进程"}, headers=auth_headers).status == 429

    # Others are not limited by this user's spending; a higher quota lets the user on.
    llm_settings.reply_text("你好")
    other = chat(live_asgi, {"message": "你好"}, headers={"Authorization": f"Bearer {token_for(other_user)}"})
    assert other.status == 200
    settings.USER_DAILY_TOKEN_QUOTA = 100
    llm_settings.reply_text("好的", usage=SPENT)
    assert chat(live_asgi, {"message": "继续"}, headers=auth_headers).status == 200
    assert user_tokens_today(user_id=user.pk) == 70


def test_no_quota_by_default(live_asgi, settings, llm_settings, agent, auth_headers):
    assert settings.USER_DAILY_TOKEN_QUOTA == 0
    for text in ("一", "二"):
        llm_settings.reply_text(text, usage={"prompt_tokens": 10 ** 6, "completion_tokens": 1, "total_tokens": 10 ** 6})
        assert chat(live_asgi, {"message": text}, headers=auth_headers).status == 200


def test_keyword_routed_turns_spend_nothing(live_asgi, settings, agent, auth_headers, subagent_server):
    settings.USER_DAILY_TOKEN_QUOTA = 1
    settings.LLM_BASE_URL = ""
    for _ in range(2):
        result = chat(live_asgi, {"message": "食堂今天吃什么"}, headers=auth_headers)
        assert result.status == 200 and result.frames[-1].get("fallback") is True


def test_usage_columns():
    assert usage_columns({"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150,
                          "prompt_tokens_details": {"cached_tokens": 100}}) == {
        "prompt_tokens": 120, "completion_tokens": 30, "cached_tokens": 100}
    assert usage_columns({"prompt_tokens": 5, "cached_tokens": 2})["cached_tokens"] == 2
    assert usage_columns(None) == {"prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": 0}
    assert usage_columns({"prompt_tokens": "9", "completion_tokens": -1, "cached_tokens": True}) == {
        "prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": 0}
