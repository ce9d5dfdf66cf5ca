"""U+0000 from the model or a sub-agent is dropped, in frames and rows (PostgreSQL text/jsonb refuse NUL)."""
import pytest

from chat_app.models import Message
from testkit.model.fake_llm import Reply, ScriptedCall
from testkit.subagents.contract_agent import answer_chunks
from testkit.web.sse import chat

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.embedded]


def test_nul_in_model_and_sub_agent_output_is_stored_without_it(
    live_asgi, llm_settings, agent, auth_headers, subagent_server
):
    llm_settings.queue(Reply(text="我查\u0000一下。", chunk_size=2,
                             tool_calls=[ScriptedCall("call_canteen", {"message": "吃\u0000啥"}, id="call_1")]))
    llm_settings.reply_text("一食堂\u0000有红烧肉。", chunk_size=2)
    result = chat(live_asgi, {"message": "今天吃啥"}, headers=auth_headers)
    assert result.status == 200 and result.types[-1] == "done"
    assert "\\u0000" not in result.raw
    assert result.frames[-1]["full_text"] == "我查一下。一食堂有红烧肉。"  # shown as stored

    rows = list(Message.objects.filter(conversation_id=result.frames[0]["conversation_id"]).order_by("created_at", "seq"))
    assert [r.role for r in rows] == ["user", "assistant", "tool", "assistant"]
    _, calls, tool, reply = rows
    assert calls.content == "我查一下。"
    assert tool.content == "".join(answer_chunks("吃啥"))
    assert reply.content == "一食堂有红烧肉。"
    assert str(reply.id) == result.frames[-1]["message_id"]
    for row in rows:
        assert "\x00" not in row.content
        assert not any("\x00" in text for text in _strings(row.meta))


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
