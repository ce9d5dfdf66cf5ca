"""A client's X-Request-Id (nginx's 32 hex, a UUID) is kept through the whole turn (docs/design.md#cross-cutting-rules)."""
import pytest

from chat_app.models import Message
from testkit.web.sse import chat

pytestmark = pytest.mark.django_db(transaction=True)

UUID_ID = "3F2504E0-4F89-11D3-9A0C-0305E82C3301"
LONGEST_ID = "a1-" * 21 + "z"  # 64 characters: the column's length


@pytest.mark.parametrize("sent", [UUID_ID, LONGEST_ID])
def test_client_request_id_reaches_sub_agent_model_and_rows(
    live_asgi, llm_settings, agent, auth_headers, subagent_server, sent
):
    llm_settings.reply_tool_calls(("call_canteen", {"message": "今天吃啥"}))
    llm_settings.reply_text("一食堂有红烧肉。")
    result = chat(live_asgi, {"message": "今天吃啥"}, headers={**auth_headers, "X-Request-Id": sent})

    assert result.status == 200 and result.types[-1] == "done"
    assert result.headers["x-request-id"] == sent
    assert result.frames[0]["request_id"] == sent
    assert subagent_server.last_request.headers["x-request-id"] == sent
    assert [r.headers["x-request-id"] for r in llm_settings.requests] == [sent, sent]
    rows = Message.objects.filter(conversation_id=result.frames[0]["conversation_id"])
    assert [r.request_id for r in rows] == [sent] * 4  # user, tool_calls, tool, reply
