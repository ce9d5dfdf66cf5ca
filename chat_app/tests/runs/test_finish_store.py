"""Issue 20 point 3: whatever the model reports and whatever the database refuses, the reply is kept.

A model reporting `prompt_tokens: 10**20` made the whole finish fail on SQLite ("Python int too
large to convert to SQLite INTEGER") and PostgreSQL (integer ends at 2**31 - 1): only the question
was stored and the run stayed `running` for minutes. Scripted model (FakeLlm `usage=`), live server,
both databases; a refusal of the database is a real one (a trigger), not a patched function.
"""
import pytest
from django.conf import settings

from chat_app.models import Message, Run
from chat_app.runs.engine import STORE_FAILED_MESSAGE, STORE_PARTIAL_MESSAGE
from chat_app.runs.recording import USAGE_COUNT_MAX, usage_clean, usage_columns
from chat_app.runs.state import STORE_FAILED_REAP_MESSAGE, WORKER_LOST_MESSAGE, runs_reap
from testkit.polling import wait_for
from testkit.refused_rows import rows_refused
from testkit.web.sse import chat

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.embedded]

HUGE = 10**20


def _reply(conversation_id) -> Message:
    return Message.objects.filter(conversation_id=conversation_id, role="assistant").order_by("created_at", "seq").last()


def test_a_huge_usage_figure_is_clamped_and_the_reply_stored(live_asgi, llm_settings, agent, auth_headers):
    usage = {"prompt_tokens": HUGE, "completion_tokens": -5, "total_tokens": HUGE * 2,
             "prompt_tokens_details": {"cached_tokens": HUGE * 10, "audio": "x"}, "note": "text is dropped"}
    llm_settings.reply_text("一食堂今天有红烧肉。", usage=usage)
    result = chat(live_asgi, {"message": "今天吃啥"}, headers=auth_headers)

    assert result.types == ["session", *["chunk"] * (len(result.types) - 2), "done"], result.frames
    done = result.frames[-1]
    assert "interrupted" not in done
    assert done["usage"] == {"prompt_tokens": USAGE_COUNT_MAX, "completion_tokens": 0, "total_tokens": USAGE_COUNT_MAX,
                             "prompt_tokens_details": {"cached_tokens": USAGE_COUNT_MAX}}
    reply = _reply(result.frames[0]["conversation_id"])
    assert reply.content == "一食堂今天有红烧肉。"
    assert reply.meta["usage"] == done["usage"]
    assert (reply.prompt_tokens, reply.completion_tokens, reply.cached_tokens) == (USAGE_COUNT_MAX, 0, USAGE_COUNT_MAX)
    run = Run.objects.get(id=result.frames[0]["run_id"])
    assert run.status == Run.Status.FINISHED


@pytest.mark.parametrize("usage", [
    {"prompt_tokens": float("nan"), "completion_tokens": float("inf")},
    {"prompt_tokens": True, "completion_tokens": [1], "total_tokens": {"deep": {"deeper": 1}}},
    {"prompt_tokens": 12.9, "completion_tokens": "9"},
    {f"k{i}": i for i in range(100)},
    {"x" * 200: 1, 5: 2},
])
def test_usage_is_counts_only_whatever_the_model_sends(usage):
    cleaned = usage_clean(usage)
    assert len(cleaned) <= 32
    for value in cleaned.values():
        inner = value.values() if isinstance(value, dict) else [value]
        assert all(isinstance(v, int) and 0 <= v <= USAGE_COUNT_MAX for v in inner)
    assert all(0 <= v <= USAGE_COUNT_MAX for v in usage_columns(usage).values())


def test_rows_the_database_refuses_leave_the_reply_text_stored(live_asgi, llm_settings, agent, auth_headers,
                                                               subagent_server):
    llm_settings.reply_tool_calls(("call_canteen", {"message": "今天吃啥"}))
    llm_settings.reply_text("一食堂有红烧肉。")
    with rows_refused("NEW.role = 'tool'"):
        result = chat(live_asgi, {"message": "今天吃啥"}, headers=auth_headers)

    errors = [f for f in result.frames if f["type"] == "error"]
    assert [e["message"] for e in errors] == [STORE_PARTIAL_MESSAGE]
    assert result.types[-1] == "done" and result.frames[-1]["interrupted"] is True
    conversation_id = result.frames[0]["conversation_id"]
    rows = list(Message.objects.filter(conversation_id=conversation_id).order_by("created_at", "seq"))
    # No tool_calls row without its tool rows: the round is left out, its text is in the reply.
    assert [r.role for r in rows] == ["user", "assistant"]
    reply = rows[-1]
    assert str(reply.id) == result.frames[-1]["message_id"]
    assert reply.content.endswith("一食堂有红烧肉。")
    assert reply.meta["interrupted"] is True and reply.meta["store_failed"] is True
    assert reply.meta["errors"][-1]["message"] == STORE_PARTIAL_MESSAGE
    assert Run.objects.get(id=result.frames[0]["run_id"]).status == Run.Status.INTERRUPTED


def test_a_run_that_stored_nothing_is_reaped_at_once_and_says_the_store_failed(live_asgi, llm_settings, agent,
                                                                               auth_headers):
    llm_settings.reply_text("一食堂有红烧肉。")
    with rows_refused("NEW.role = 'assistant'"):
        result = chat(live_asgi, {"message": "今天吃啥"}, headers=auth_headers)
        assert [f["message"] for f in result.frames if f["type"] == "error"] == [STORE_FAILED_MESSAGE]
        run = Run.objects.get(id=result.frames[0]["run_id"])
        # Still running (nothing could be stored), but no longer heart-beaten by its worker.
        assert run.status == Run.Status.RUNNING and run.partial_text == "一食堂有红烧肉。"
    wait_for(lambda: Run.objects.get(id=run.id).status != Run.Status.RUNNING or runs_reap(
        stale_sec=settings.RUN_STALE_SEC), timeout=10)
    run.refresh_from_db()
    assert run.status == Run.Status.INTERRUPTED
    reply = Message.objects.get(id=run.message_id)
    assert reply.content == "一食堂有红烧肉。"
    assert reply.meta["errors"] == [{"code": 50002, "message": STORE_FAILED_REAP_MESSAGE}]
    assert str(WORKER_LOST_MESSAGE) not in str(reply.meta)
