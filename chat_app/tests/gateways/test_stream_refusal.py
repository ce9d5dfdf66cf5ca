"""A model that declines (OpenAI's `delta.refusal`, its `content` null): the refusal is the answer —
streamed, stored, sent back in the next turn's history and given to `/v1` clients — never an
empty reply. The scripted model streams it as OpenAI documents: the first delta carries
`"refusal": ""` beside `"content": null`, then the refusal's pieces, then `finish_reason: stop`."""
import json

import openai
import pytest

from chat_app.accounts.api_keys import api_key_create
from chat_app.models import Message
from testkit.model.fake_llm import Reply
from testkit.web.sse import chat

pytestmark = pytest.mark.django_db(transaction=True)

REFUSAL = "抱歉，我不能帮你代写这份检讨书。"


def _refusal_body():
    head = {"id": "chatcmpl-9", "object": "chat.completion.chunk", "created": 1764583620, "model": "gpt-4o",
            "system_fingerprint": "fp_1"}

    def event(delta: dict, finish=None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return f"data: {json.dumps({**head, 'choices': [choice]}, ensure_ascii=False)}\n\n".encode()

    pieces = [event({"role": "assistant", "content": None, "refusal": ""})]
    pieces += [event({"refusal": REFUSAL[i:i + 5]}) for i in range(0, len(REFUSAL), 5)]
    pieces += [event({}, "stop"), b"data: [DONE]\n\n"]
    return lambda: iter(pieces)


def test_a_refusal_is_the_answer_and_the_next_turn_remembers_it(live_asgi, llm_settings, agent, auth_headers):
    llm_settings.queue(Reply(body=_refusal_body()))
    result = chat(live_asgi, {"message": "帮我写检讨书"}, headers=auth_headers)

    assert result.text == result.frames[-1]["full_text"] == REFUSAL
    assert "interrupted" not in result.frames[-1]
    assert Message.objects.get(id=result.frames[-1]["message_id"]).content == REFUSAL

    llm_settings.reply_text("好的。")
    chat(live_asgi, {"message": "那算了", "conversation_id": result.frames[0]["conversation_id"]},
         headers=auth_headers)
    assert {"role": "assistant", "content": REFUSAL} in llm_settings.last_request.messages


def test_openai_clients_get_the_refusal_as_content(live_asgi, llm_settings, agent, user):
    key = api_key_create(user=user, name="Chatbox")[1]
    llm_settings.queue(Reply(body=_refusal_body()))
    with openai.OpenAI(base_url=f"{live_asgi}/v1", api_key=key, max_retries=0, timeout=20) as sdk:
        chunks = list(sdk.chat.completions.create(model="xiaozhi", stream=True,
                                                  messages=[{"role": "user", "content": "帮我写检讨书"}]))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == REFUSAL
