"""A reply the model itself cut short (docs/design.md#the-tool-loop, `finish_reason`): `length` (the
`max_tokens` cut) and `content_filter` (Zhipu GLM: `sensitive`) end the turn as interrupted, with
the reason, through the REST stream, the stored row, a re-attached run and `/v1` (the official
`openai` client); a provider's own failure word (DeepSeek's `insufficient_system_resource`) is a
model failure. The scripted model ends its stream exactly as the providers document it: the last
chunk's `finish_reason`."""
import httpx
import openai
import pytest

from agents_app.runtime.loop import CUT_TEXT, MODEL_INTERRUPTED_TEXT
from chat_app.accounts.api_keys import api_key_create
from chat_app.models import Message, Run
from chat_app.runs.state import run_stored_end
from testkit.model.fake_llm import Reply, ScriptedCall
from testkit.web.sse import chat, parse_events

pytestmark = pytest.mark.django_db(transaction=True)

HALF = "选课的第一步是登录教务系统，然后在“选课中心”里"


@pytest.mark.parametrize(("finish", "reason"), [("length", "length"), ("content_filter", "content_filter"),
                                                ("sensitive", "content_filter")])
def test_a_cut_answer_is_interrupted_with_its_reason_stored_and_told(live_asgi, llm_settings, agent, auth_headers,
                                                                       finish, reason):
    llm_settings.queue(Reply(text=HALF, finish_reason=finish))
    result = chat(live_asgi, {"message": "怎么选课"}, headers=auth_headers)

    assert result.types[-2:] == ["error", "done"]
    assert result.frames[-2]["code"] == 50003 and result.frames[-2]["message"] == str(CUT_TEXT[reason])
    done = result.frames[-1]
    assert done["interrupted"] is True and done["interrupted_reason"] == reason and done["full_text"] == HALF
    reply = Message.objects.get(id=done["message_id"])
    assert reply.content == HALF  # what was written is kept, marked as cut
    assert reply.meta["interrupted"] is True and reply.meta["interrupted_reason"] == reason
    assert reply.meta["errors"] == [{"code": 50003, "message": str(CUT_TEXT[reason])}]
    run = Run.objects.get(id=result.frames[0]["run_id"])
    assert run.status == Run.Status.INTERRUPTED
    # a client that comes back after the run's log expired is told the same
    assert run_stored_end(run=run)["interrupted_reason"] == reason
    replayed, _ = parse_events(httpx.get(f"{live_asgi}/api/v1/runs/{run.id}/events", headers=auth_headers,
                                         timeout=10).text)
    assert replayed[-1]["interrupted_reason"] == reason


def test_a_whole_answer_is_not_marked(live_asgi, llm_settings, agent, auth_headers):
    llm_settings.queue(Reply(text=HALF + "勾选课程。"))
    done = chat(live_asgi, {"message": "怎么选课"}, headers=auth_headers).frames[-1]
    assert "interrupted" not in done and "interrupted_reason" not in done
    assert "interrupted_reason" not in Message.objects.get(id=done["message_id"]).meta


def test_tool_calls_cut_at_the_length_limit_are_not_run(live_asgi, llm_settings, agent, auth_headers,
                                                        subagent_server):
    # The arguments of the last call may be cut mid-way: none of the round's calls runs.
    llm_settings.queue(Reply(text="我查一下。", tool_calls=[ScriptedCall("call_canteen", {"message": "今晚"})],
                             finish_reason="length"))
    result = chat(live_asgi, {"message": "今晚吃什么"}, headers=auth_headers)

    assert "tool_call" not in result.types and subagent_server.requests == []
    assert result.frames[-1]["interrupted_reason"] == "length"
    assert [m.role for m in Message.objects.order_by("created_at", "seq")] == ["user", "assistant"]


def test_a_provider_failing_mid_answer_is_a_model_failure(live_asgi, llm_settings, agent, auth_headers, settings):
    settings.KEYWORD_FALLBACK_ENABLED = False
    llm_settings.queue(Reply(text=HALF, finish_reason="insufficient_system_resource"))  # DeepSeek's word
    result = chat(live_asgi, {"message": "怎么选课"}, headers=auth_headers)
    assert result.frames[-2]["message"] == str(MODEL_INTERRUPTED_TEXT)
    assert result.frames[-1]["interrupted"] is True and "interrupted_reason" not in result.frames[-1]


def test_a_provider_failing_before_a_word_lets_keyword_routing_answer(live_asgi, llm_settings, agent, auth_headers,
                                                                        subagent_server):
    llm_settings.queue(Reply(text="", finish_reason="insufficient_system_resource"))
    done = chat(live_asgi, {"message": "食堂今天有什么菜"}, headers=auth_headers).frames[-1]
    assert done.get("fallback") is True and "interrupted" not in done


@pytest.mark.parametrize("finish", ["length", "content_filter"])
def test_openai_clients_get_the_models_finish_reason(live_asgi, llm_settings, agent, user, finish):
    key = api_key_create(user=user, name="Chatbox")[1]
    with openai.OpenAI(base_url=f"{live_asgi}/v1", api_key=key, max_retries=0, timeout=20) as sdk:
        ask = {"model": "xiaozhi", "messages": [{"role": "user", "content": "怎么选课"}]}
        llm_settings.queue(Reply(text=HALF, finish_reason=finish))
        chunks = list(sdk.chat.completions.create(**ask, stream=True))
        assert chunks[-1].choices[0].finish_reason == finish
        assert "".join(c.choices[0].delta.content or "" for c in chunks).startswith(HALF)

        llm_settings.queue(Reply(text=HALF, finish_reason=finish))
        completion = sdk.chat.completions.create(**ask)
        assert completion.choices[0].finish_reason == finish
