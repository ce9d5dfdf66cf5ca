"""A question with attachments (issue 26 point 1, docs/design.md#attachments), end to end on loopback: uploaded
to the project on uvicorn, sent with `POST /api/v1/chat`, and what the scripted model is sent —
a document's text headed by its name, an image as an `image_url` part when the agent reads
images, else a line naming it — with the question's row keeping the attachments."""
import base64

import httpx
import pytest

from agents_app.runtime.fallback import ATTACHMENTS_UNREAD_NOTE, FOLLOW_UP_NOTE
from chat_app.conversations.history import IMAGE_UNSEEN
from chat_app.models import Message, Upload
from chat_app.tests.conversations.test_uploads import PNG
from testkit.web.sse import chat

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def media(settings, tmp_path):
    settings.MEDIA_ROOT = str(tmp_path / "media")


def _upload(base: str, headers: dict, name: str, data: bytes) -> str:
    answer = httpx.post(f"{base}/api/v1/uploads", headers=headers, files={"file": (name, data)}, timeout=20)
    assert answer.status_code == 201, answer.text
    return answer.json()["id"]


def _question(llm) -> dict:
    return [m for m in llm.requests[-1].body["messages"] if m["role"] == "user"][-1]


def test_a_document_and_an_image_reach_a_model_that_reads_images(live_asgi, llm_settings, agent_factory,
                                                                 auth_headers):
    agent_factory(accepts_images=True)
    notice = _upload(live_asgi, auth_headers, "考试通知.txt", "期末考试 6 月 18 日".encode())
    picture = _upload(live_asgi, auth_headers, "课表.png", PNG)
    llm_settings.reply_text("6 月 18 日考试。")
    result = chat(live_asgi, {"message": "这两个附件说了什么", "attachments": [notice, picture]}, headers=auth_headers)
    assert result.types[-1] == "done"
    parts = _question(llm_settings)["content"]
    assert parts[0] == {"type": "text", "text": "这两个附件说了什么"}
    assert parts[1]["text"] == "附件《考试通知.txt》的内容：\n期末考试 6 月 18 日"
    assert parts[2]["text"] == "附件《课表.png》是一张图片："
    assert parts[3] == {"type": "image_url",
                        "image_url": {"url": "data:image/png;base64," + base64.b64encode(PNG).decode()}}
    question = Message.objects.get(role="user")
    assert [a["name"] for a in question.meta["attachments"]] == ["考试通知.txt", "课表.png"]
    assert set(Upload.objects.values_list("conversation_id", flat=True)) == {question.conversation_id}

    # The next question of the conversation names them; the files are not sent again.
    llm_settings.reply_text("好的。")
    chat(live_asgi, {"message": "谢谢", "conversation_id": str(question.conversation_id)}, headers=auth_headers)
    earlier = [m for m in llm_settings.requests[-1].body["messages"] if m["role"] == "user"][0]
    assert earlier["content"] == "这两个附件说了什么\n（这条消息附有：《考试通知.txt》、《课表.png》）"


def test_a_model_that_reads_no_images_is_told_the_file_name(live_asgi, llm_settings, agent_factory, auth_headers):
    agent_factory()  # its provider (LLM_*) reads no images
    picture = _upload(live_asgi, auth_headers, "截图.png", PNG)
    llm_settings.reply_text("我看不到图片。")
    chat(live_asgi, {"message": "看看这个", "attachments": [picture]}, headers=auth_headers)
    parts = _question(llm_settings)["content"]
    assert parts[1] == {"type": "text", "text": IMAGE_UNSEEN.format(name="截图.png")}
    assert all(p["type"] == "text" for p in parts)


def test_attachments_that_are_not_the_callers_are_refused_and_nothing_is_stored(
    live_asgi, llm_settings, agent_factory, auth_headers, other_user, token_for
):
    agent_factory()
    theirs = _upload(live_asgi, {"Authorization": f"Bearer {token_for(other_user)}"}, "别人的.txt", b"secret")
    refused = chat(live_asgi, {"message": "看看", "attachments": [theirs]}, headers=auth_headers)
    assert refused.status == 404
    for bad in (["not-a-uuid"], "one", [theirs] * 6, [1]):
        assert chat(live_asgi, {"message": "看看", "attachments": bad}, headers=auth_headers).status == 400
    assert not Message.objects.exists() and llm_settings.requests == []


def test_without_a_model_the_answer_says_what_keyword_routing_did_not_read(
    live_asgi, settings, agent, auth_headers, subagent_server
):
    """Issue 42: with no model the attachment was silently ignored (its text even went to the
    sub-agent as the question) and a follow-up lost its context without a word."""
    settings.LLM_BASE_URL = ""
    notice = _upload(live_asgi, auth_headers, "通知.txt", "图书馆周末闭馆".encode())
    first = chat(live_asgi, {"message": "清真食堂几点开门", "attachments": [notice]}, headers=auth_headers)
    assert first.frames[-1]["fallback"] is True
    assert subagent_server.requests[-1].body["message"] == "清真食堂几点开门"
    assert str(ATTACHMENTS_UNREAD_NOTE).strip() in first.text and str(FOLLOW_UP_NOTE).strip() not in first.text

    conversation = {"conversation_id": first.frames[0]["conversation_id"]}
    follow_up = chat(live_asgi, {"message": "那二食堂呢？", **conversation}, headers=auth_headers)
    assert str(FOLLOW_UP_NOTE).strip() in follow_up.text and str(ATTACHMENTS_UNREAD_NOTE).strip() not in follow_up.text
    again = chat(live_asgi, {"message": "二食堂晚饭呢？", **conversation}, headers=auth_headers)
    assert again.frames[-1]["fallback"] is True and str(FOLLOW_UP_NOTE).strip() not in again.text  # said once
