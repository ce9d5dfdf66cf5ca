"""Usage per user, agent and day: the columns of a stored turn, the rollup kept from them (which
survives a deleted conversation), its rebuild, the report's sums and the admin page. Runs on
SQLite and on PostgreSQL (DATABASE_URL)."""
from datetime import timedelta

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from chat_app.models import Message
from insights_app.models import UsageDaily
from insights_app.usage import (
    usage_by_agent,
    usage_by_day,
    usage_by_provider,
    usage_rollup_rebuild,
    usage_top_users,
    usage_totals,
)
from testkit.web.sse import chat

pytestmark = pytest.mark.embedded

USAGE_1 = {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
USAGE_2 = {"prompt_tokens": 150, "completion_tokens": 20, "total_tokens": 170}


def _rollup() -> list[tuple]:
    return list(UsageDaily.objects.order_by("model", "agent_name").values_list(
        "day", "username", "agent_name", "model", "turns", "fallback_turns", "prompt_tokens", "completion_tokens"))


@pytest.mark.django_db(transaction=True)
def test_turn_usage_is_stored_in_columns_and_rolled_up(live_asgi, llm_settings, agent, user, headers_for):
    headers = headers_for(user)
    llm_settings.reply_tool_calls(("call_canteen", {"message": "今天吃啥"}), usage=USAGE_1)
    llm_settings.reply_text("一食堂有红烧肉。", usage=USAGE_2)
    first = chat(live_asgi, {"message": "今天吃啥"}, headers=headers)
    assert first.types[-1] == "done"

    rows = list(Message.objects.filter(conversation_id=first.frames[0]["conversation_id"]).order_by("created_at", "seq"))
    assert [r.role for r in rows] == ["user", "assistant", "tool", "assistant"]
    final = rows[-1]
    assert (final.prompt_tokens, final.completion_tokens, final.cached_tokens, final.model) == (250, 30, 0, "fake-model")
    assert all((r.prompt_tokens, r.completion_tokens, r.model) == (0, 0, "") for r in rows[:-1])
    today = timezone.localdate()
    assert _rollup() == [(today, user.username, agent.name, "fake-model", 1, 0, 250, 30)]

    llm_settings.reply_text("不客气。", usage={"prompt_tokens": 12, "completion_tokens": 9, "total_tokens": 21})
    chat(live_asgi, {"message": "谢谢", "conversation_id": first.frames[0]["conversation_id"]}, headers=headers)
    assert _rollup() == [(today, user.username, agent.name, "fake-model", 2, 0, 262, 39)]

    assert UsageDaily.objects.get().provider == "default"  # the LLM_* provider answered

    # The rebuild from the stored messages agrees with what the turns added up.
    assert usage_rollup_rebuild() == 1
    assert _rollup() == [(today, user.username, agent.name, "fake-model", 2, 0, 262, 39)]
    assert UsageDaily.objects.get().provider == "default"

    # A student deleting the conversation removes the messages, not what the day cost.
    with httpx.Client(base_url=live_asgi, headers=headers) as client:
        assert client.delete(f"/api/v1/conversations/{first.frames[0]['conversation_id']}").status_code == 204
    assert not Message.objects.exists()
    assert _rollup() == [(today, user.username, agent.name, "fake-model", 2, 0, 262, 39)]


@pytest.mark.django_db(transaction=True)
def test_keyword_routed_turns_count_as_turns_with_no_tokens(live_asgi, settings, llm_settings, agent, user,
                                                             headers_for, subagent_server):
    headers = headers_for(user)
    llm_settings.reply_text("你好。", usage={"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7})
    chat(live_asgi, {"message": "你好"}, headers=headers)
    settings.LLM_BASE_URL = ""  # no model: keyword routing answers
    result = chat(live_asgi, {"message": "食堂今天吃什么"}, headers=headers)
    assert result.frames[-1].get("fallback") is True
    final = Message.objects.get(id=result.frames[-1]["message_id"])
    assert (final.prompt_tokens, final.completion_tokens, final.model) == (0, 0, "")
    today = timezone.localdate()
    assert _rollup() == [
        (today, user.username, agent.name, "", 1, 1, 0, 0),
        (today, user.username, agent.name, "fake-model", 1, 0, 5, 2),
    ]


@pytest.fixture
def usage_rows(db, user):
    other = get_user_model().objects.create_user(username="20230009")
    today = timezone.localdate()
    yesterday = today - timedelta(days=1)
    made = [
        (today, user, "校园小智", "qwen-plus", 3, 0, 3000, 300, 1000),
        (today, user, "校园小智", "", 2, 2, 0, 0, 0),
        (today, other, "选课助手", "qwen-plus", 1, 0, 500, 50, 0),
        (yesterday, other, "校园小智", "qwen-plus", 4, 0, 8000, 800, 0),
    ]
    for day, who, agent_name, model, turns, fallback, prompt, completion, cached in made:
        UsageDaily.objects.create(day=day, user=who, username=who.username, agent_name=agent_name, model=model,
                                  turns=turns, fallback_turns=fallback, prompt_tokens=prompt,
                                  completion_tokens=completion, cached_tokens=cached)
    return today, yesterday, other


def test_report_sums(usage_rows, user):
    today, yesterday, other = usage_rows
    everything = UsageDaily.objects.all()
    totals = usage_totals(rows=everything)
    assert (totals.turns, totals.fallback_turns, totals.prompt_tokens, totals.completion_tokens,
            totals.cached_tokens, totals.total_tokens) == (10, 2, 11500, 1150, 1000, 12650)
    assert [(u["username"], u["turns"], u["total_tokens"]) for u in usage_top_users(rows=everything)] == [
        (other.username, 5, 9350), (user.username, 5, 3300)]
    assert [(a["agent_name"], a["turns"], a["total_tokens"]) for a in usage_by_agent(rows=everything)] == [
        ("校园小智", 9, 12100), ("选课助手", 1, 550)]
    assert [(d["day"], d["total_tokens"]) for d in usage_by_day(rows=everything)] == [(today, 3850), (yesterday, 8800)]
    only_today = usage_top_users(rows=everything.filter(day=today))
    assert [(u["username"], u["total_tokens"]) for u in only_today] == [(user.username, 3300), (other.username, 550)]


def test_usage_admin_page(usage_rows, staff_client, user):
    today, yesterday, other = usage_rows
    page = staff_client.get("/admin/insights_app/usagedaily/")
    assert page.status_code == 200
    assert page.context["usage_totals"].total_tokens == 12650
    assert [u["username"] for u in page.context["usage_top_users"]] == [other.username, user.username]
    assert "用量最多的用户" in page.content.decode()

    ranged = staff_client.get("/admin/insights_app/usagedaily/", {"day__gte": today.isoformat(),
                                                                   "day__lte": today.isoformat()})
    assert ranged.status_code == 200
    assert ranged.context["usage_totals"].total_tokens == 3850
    assert ranged.context["day_from"] == today.isoformat()

    searched = staff_client.get("/admin/insights_app/usagedaily/", {"q": other.username})
    assert searched.context["usage_totals"].total_tokens == 9350
    assert staff_client.get("/admin/insights_app/usagedaily/add/").status_code == 403


def test_rebuild_command_since_a_day(usage_rows, user, agent):
    """Rows before --since are kept; from it on they are recomputed from the messages."""
    import io

    from django.core.management import call_command

    from chat_app.models import Conversation

    today, yesterday, other = usage_rows
    conversation = Conversation.objects.create(user=user, agent=agent)
    Message.objects.create(conversation=conversation, role="user", content="你好")
    Message.objects.create(conversation=conversation, role="assistant", content="你好", agent_name=agent.name,
                           model="qwen-plus", prompt_tokens=7, completion_tokens=3, meta={"usage": {}})
    Message.objects.create(conversation=conversation, role="assistant", content="", agent_name=agent.name,
                           meta={"tool_calls": []})  # a tool round: not a turn
    out = io.StringIO()
    call_command("usage_rollup_rebuild", "--since", today.isoformat(), stdout=out)
    assert "1 行" in out.getvalue()
    assert list(UsageDaily.objects.filter(day=today).values_list("username", "turns", "prompt_tokens")) == [
        (user.username, 1, 7)]
    assert UsageDaily.objects.get(day=yesterday).prompt_tokens == 8000


def test_usage_admin_page_ignores_an_empty_bound(usage_rows, staff_client):
    today, _, _ = usage_rows
    response = staff_client.get("/admin/insights_app/usagedaily/", {"day__gte": today.isoformat(), "day__lte": ""})
    assert response.status_code == 302 and response.url == f"/admin/insights_app/usagedaily/?day__gte={today}"
    assert staff_client.get(response.url).context["usage_totals"].total_tokens == 3850


@pytest.mark.django_db(transaction=True)
def test_usage_per_provider(live_asgi, llm_settings, llm_server_second, agent, user, headers_for, staff_client,
                            provider_factory, agent_fallbacks_set):
    """A turn the fallback provider answered is counted under it (and its model), live and rebuilt."""
    headers = headers_for(user)
    agent.provider = provider_factory(name="主", base_url=llm_settings.url)
    agent.save()
    agent_fallbacks_set(agent, [provider_factory(name="备用", base_url=llm_server_second.url,
                                                 default_model="backup-model")])
    llm_settings.reply_text("主回答。", usage={"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11})
    chat(live_asgi, {"message": "一"}, headers=headers)
    llm_settings.fail(503)
    llm_server_second.reply_text("备用回答。", usage={"prompt_tokens": 20, "completion_tokens": 2, "total_tokens": 22})
    chat(live_asgi, {"message": "二"}, headers=headers)

    expected = [("备用", "backup-model", 1, 22), ("主", "fake-model", 1, 11)]
    by_provider = usage_by_provider(rows=UsageDaily.objects.all())
    assert [(g["provider"], g["model"], g["turns"], g["total_tokens"]) for g in by_provider] == expected
    usage_rollup_rebuild()
    by_provider = usage_by_provider(rows=UsageDaily.objects.all())
    assert [(g["provider"], g["model"], g["turns"], g["total_tokens"]) for g in by_provider] == expected
    page = staff_client.get("/admin/insights_app/usagedaily/", {"provider": "备用"})
    assert page.status_code == 200 and "按模型提供方" in page.content.decode()
    assert page.context["usage_totals"].total_tokens == 22


@pytest.mark.django_db
@pytest.mark.parametrize("vendor_path", ["upsert", "orm"])
def test_a_turn_is_added_to_its_days_row_in_one_statement(user, vendor_path, monkeypatch):
    """SQLite and PostgreSQL add a turn with one INSERT … ON CONFLICT DO UPDATE; any other
    database takes the ORM path (forced here): both give the same rows."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from chat_app.runs.quota import TurnUsage
    from insights_app import usage as usage_module

    if vendor_path == "orm":
        monkeypatch.setattr(usage_module, "_UPSERT_VENDORS", ())
    today = timezone.localdate()

    def turn(model: str, prompt: int, *, fallback: bool = False) -> TurnUsage:
        return TurnUsage(user_id=user.pk, agent_name="校园小智", model=model, day=today, prompt_tokens=prompt,
                         completion_tokens=prompt // 10, cached_tokens=prompt // 20, fallback=fallback,
                         interrupted=False, provider="default")

    with CaptureQueriesContext(connection) as queries:
        usage_module.usage_turn_add(usage=turn("qwen-plus", 100))
    if vendor_path == "upsert":
        assert len(queries) == 1
    usage_module.usage_turn_add(usage=turn("qwen-plus", 200, fallback=True))
    usage_module.usage_turn_add(usage=turn("qwen-max", 40))
    rows = list(UsageDaily.objects.order_by("model").values_list(
        "day", "user_id", "username", "model", "turns", "fallback_turns", "prompt_tokens", "completion_tokens",
        "cached_tokens"))
    assert rows == [
        (today, user.pk, user.username, "qwen-max", 1, 0, 40, 4, 2),
        (today, user.pk, user.username, "qwen-plus", 2, 1, 300, 30, 15),
    ]
