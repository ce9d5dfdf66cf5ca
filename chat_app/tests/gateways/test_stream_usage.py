"""Usage where providers put it (docs/runtime.md, "Usage"): a chunk's `usage` (OpenAI), Groq's
`x_groq.usage`, Moonshot Kimi's `choices[0].usage`, OpenRouter's error chunk, and vLLM's
continuous usage (the running total on every chunk) — each counted once, stored on the reply
and charged to the student's daily quota, whatever the answer's end. The scripted model sends
each stream in the provider's documented shape, byte for byte, one event per write."""
import json

import pytest

from chat_app.models import Message
from chat_app.runs.quota import user_tokens_today
from testkit.model.fake_llm import Reply
from testkit.web.sse import chat

pytestmark = pytest.mark.django_db(transaction=True)

HEAD = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1764583620, "model": "m"}
ANSWER = "二食堂今天有红烧肉。"


def _event(payload: dict) -> bytes:
    return f"data: {json.dumps({**HEAD, **payload}, ensure_ascii=False)}\n\n".encode()


def _text(content: str, finish=None, **extra) -> dict:
    return {"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": finish, **extra}]}


def _body(*events: dict, done: bool = True):
    pieces = [_event(e) for e in events] + ([b"data: [DONE]\n\n"] if done else [])
    return lambda: iter(pieces)


GROQ = {  # Groq: usage only in x_groq on the last chunk, with its timings
    "x_groq": {"id": "req_01", "usage": {"queue_time": 0.02, "prompt_tokens": 41, "prompt_time": 0.003,
                                         "completion_tokens": 9, "completion_time": 0.01, "total_tokens": 50,
                                         "total_time": 0.013}}}


@pytest.mark.parametrize(("shape", "events", "prompt", "completion"), [
    ("openai", [_text(ANSWER), _text("", "stop"),
                {"choices": [], "usage": {"prompt_tokens": 41, "completion_tokens": 9, "total_tokens": 50}}], 41, 9),
    ("groq", [_text(ANSWER), {**_text("", "stop"), **GROQ}], 41, 9),
    ("kimi", [_text(ANSWER), _text("", "stop", usage={"prompt_tokens": 30, "completion_tokens": 8,
                                                      "total_tokens": 38})], 30, 8),
    ("vllm-continuous", [_text("二食堂", usage=None), *(
        {**_text(piece), "usage": {"prompt_tokens": 41, "completion_tokens": n, "total_tokens": 41 + n}}
        for n, piece in enumerate(["今天", "有红烧肉。"], start=2)), {**_text("", "stop"),
        "usage": {"prompt_tokens": 41, "completion_tokens": 5, "total_tokens": 46}}], 41, 5),
    ("groq-and-usage", [_text(ANSWER), {**_text("", "stop"), **GROQ},
                        {"choices": [], "usage": {"prompt_tokens": 41, "completion_tokens": 9, "total_tokens": 50}}],
     41, 9),
])
def test_usage_is_read_where_the_provider_puts_it_and_counted_once(live_asgi, llm_settings, agent, auth_headers,
                                                                  user, shape, events, prompt, completion):
    llm_settings.queue(Reply(body=_body(*events)))
    done = chat(live_asgi, {"message": "今天吃什么"}, headers=auth_headers).frames[-1]

    assert done["full_text"] == ANSWER and "interrupted" not in done
    assert (done["usage"]["prompt_tokens"], done["usage"]["completion_tokens"]) == (prompt, completion)
    reply = Message.objects.get(id=done["message_id"])
    assert (reply.prompt_tokens, reply.completion_tokens) == (prompt, completion)
    assert user_tokens_today(user_id=user.id) == prompt + completion


def test_openrouters_error_chunk_charges_what_the_failed_answer_cost(live_asgi, llm_settings, agent, auth_headers,
                                                                      user, settings):
    settings.KEYWORD_FALLBACK_ENABLED = False
    error_chunk = {"provider": "openai", "error": {"code": "server_error",
                                                   "message": "Provider disconnected unexpectedly"},
                   **_text("", "error"), "usage": {"prompt_tokens": 120, "completion_tokens": 33, "total_tokens": 153}}
    llm_settings.queue(Reply(body=_body(_text("二食堂今天"), error_chunk, done=False)))
    result = chat(live_asgi, {"message": "今天吃什么"}, headers=auth_headers)

    done = result.frames[-1]
    assert result.of("error") and done["interrupted"] is True
    assert (done["usage"]["prompt_tokens"], done["usage"]["completion_tokens"]) == (120, 33)
    assert Message.objects.get(id=done["message_id"]).completion_tokens == 33
    assert user_tokens_today(user_id=user.id) == 153


def test_vllms_own_error_shape_mid_stream_cuts_the_answer(live_asgi, llm_settings, agent, auth_headers, settings):
    settings.KEYWORD_FALLBACK_ENABLED = False
    vllm_error = {"object": "error", "message": "The engine died unexpectedly.", "type": "InternalServerError",
                  "param": None, "code": 500}
    pieces = [_event(_text("二食堂今天")), f"data: {json.dumps(vllm_error)}\n\n".encode()]
    llm_settings.queue(Reply(body=lambda: iter(pieces)))
    result = chat(live_asgi, {"message": "今天吃什么"}, headers=auth_headers)
    assert result.of("error") and result.frames[-1]["interrupted"] is True  # not shown as whole
