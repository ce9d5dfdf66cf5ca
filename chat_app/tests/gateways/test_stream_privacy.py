"""A turn whose question carries a mobile number and a resident ID number (issue 25 point 4):
both reach the model and the stored question as written, and the log only masked."""
import pytest

from campus_agent.tests.test_personal_numbers import (
    MOBILE,
    MOBILE_MASKED,
    RESIDENT_ID,
    RESIDENT_ID_MASKED,
    _log_size,
    _log_tail,
)
from chat_app.models import Message
from testkit.web.sse import chat


@pytest.mark.django_db(transaction=True)
def test_a_turn_with_both_numbers_logs_them_masked(live_asgi, llm_settings, agent, auth_headers):
    start = _log_size()
    question = f"我的手机号 {MOBILE}，身份证 {RESIDENT_ID}，帮我查一下宿舍电费"
    llm_settings.reply_text("好的。")
    result = chat(live_asgi, {"message": question}, headers=auth_headers)
    assert result.frames[-1]["full_text"] == "好的。"
    logged = _log_tail(start)
    assert MOBILE not in logged and RESIDENT_ID not in logged
    assert MOBILE_MASKED in logged and RESIDENT_ID_MASKED in logged  # the turn-start line shows the question
    assert Message.objects.get(role="user").content == question  # stored as written: it is the student's
    assert question in llm_settings.last_request.messages[-1]["content"]
