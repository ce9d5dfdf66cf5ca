"""Text that cannot mislead (issue 42; docs/security.md#text-that-cannot-mislead): a short label a
student types and others read — an API key's name, a conversation's title (typed, or made from the
first question), a feedback comment, the name the campus SSO gives — keeps no
bidi override, isolate or mark, no line or paragraph separator, no other control or format
character; CJK and emoji (ZWJ sequences too) stay as typed. Sent as the attack it is, to the
project served by uvicorn.
"""

import httpx
import pytest

from chat_app.models import ApiKey, Conversation, Feedback, Message

pytestmark = pytest.mark.django_db(transaction=True)

# U+202E shows what follows it reversed: "invoice", U+202E, "fdp.exe" reads "invoiceexe.pdf".
HOSTILE = "课表\u202efdp.exe\u2066隔离\u2069\u2028第二行\u2029段\u200e\u061c\x1b[31m\x7f\u200b\ufeff\U000e0041"
SHOWN = "课表fdp.exe隔离 第二行 段[31m"
EMOJI = "👩\u200d💻 程序员 🇨🇳 1️⃣ 👍🏽"  # a ZWJ sequence, a flag, a keycap, a skin tone: kept


@pytest.fixture
def bearer(user, token_for) -> dict[str, str]:
    return {"Authorization": f"Bearer {token_for(user)}"}


def test_an_api_keys_name_keeps_nothing_that_misleads(live_asgi, bearer):
    made = httpx.post(f"{live_asgi}/api/v1/api-keys", json={"name": HOSTILE}, headers=bearer)
    assert made.status_code == 201, made.text
    assert made.json()["name"] == SHOWN == ApiKey.objects.get().name
    emoji = httpx.post(f"{live_asgi}/api/v1/api-keys", json={"name": EMOJI}, headers=bearer)
    assert emoji.json()["name"] == EMOJI
    invisible = httpx.post(f"{live_asgi}/api/v1/api-keys", json={"name": "\u202e\u2066\u200b"}, headers=bearer)
    assert invisible.status_code == 400 and invisible.json()["code"] == 40001


def test_a_title_typed_or_made_from_the_question_keeps_nothing_that_misleads(
    live_asgi, bearer, settings, agent_factory
):
    settings.LLM_BASE_URL = ""  # no model: keyword routing answers
    agent_factory()
    with httpx.stream(
        "POST", f"{live_asgi}/api/v1/chat", json={"message": "\u202e食堂\u2028在哪"}, headers=bearer
    ) as answer:
        assert answer.status_code == 200 and b'"type":"done"' in answer.read()
    conversation = Conversation.objects.get()
    assert conversation.title == "食堂 在哪"
    assert Message.objects.filter(role="user").get().content == "\u202e食堂\u2028在哪"  # the question itself as asked
    renamed = httpx.patch(
        f"{live_asgi}/api/v1/conversations/{conversation.id}", json={"title": HOSTILE}, headers=bearer
    )
    assert renamed.status_code == 200 and renamed.json()["title"] == SHOWN
    emoji = httpx.patch(f"{live_asgi}/api/v1/conversations/{conversation.id}", json={"title": EMOJI}, headers=bearer)
    assert emoji.json()["title"] == EMOJI == Conversation.objects.get().title


def test_a_feedback_comment_keeps_its_lines_and_nothing_that_misleads(live_asgi, bearer, user):
    conversation = Conversation.objects.create(user=user, title="食堂")
    answer = Message.objects.create(conversation=conversation, role="assistant", content="红烧肉", seq=1)
    url = f"{live_asgi}/api/v1/messages/{answer.id}/feedback"
    comment = "价格不对\u202e\r\n第二\u2028行\t👩\u200d💻\x00"
    put = httpx.put(url, json={"rating": "down", "comment": comment}, headers=bearer)
    assert put.status_code == 200, put.text
    assert put.json()["comment"] == "价格不对\n第二\n行 👩\u200d💻" == Feedback.objects.get().comment


def test_the_name_the_campus_sso_gives_keeps_nothing_that_misleads():
    from chat_app.accounts.sessions import sso_user_upsert

    profile = {"sub": "20231234", "name": "张\u202e三\u2028丰", "roles": ["student"]}
    assert sso_user_upsert(profile=profile).first_name == "张三 丰"
    again = sso_user_upsert(profile={**profile, "name": "张三\u2066丰\u2069"})  # a later login refreshes it
    assert again.first_name == "张三丰"


def test_what_staff_name_for_students_keeps_nothing_that_misleads(staff_client, agent_factory, sub_agent_factory):
    """Saved in admin (or imported: catalog files run the same model validation), an agent's name
    and a service's display name are read by every student."""
    from django.urls import reverse

    from agents_app.models import Agent, McpService
    from subagents_app.models import SubAgent
    from testkit.web.admin_forms import admin_form_data

    agent = agent_factory()
    url = reverse("admin:agents_app_agent_change", args=[agent.pk])
    saved = staff_client.post(url, admin_form_data(staff_client.get(url), name="食堂\u202e助手\u2028小智"))
    assert saved.status_code == 302, saved.content[:500]
    assert Agent.objects.get().name == "食堂助手 小智"

    sub_agent = sub_agent_factory(display_name="")
    sub_agent.display_name = "\u2066食堂\u2069👩\u200d🍳"
    sub_agent.example_questions = "二食堂\u202e中午吃什么？\r\n\u2067哪里\u2069有清真窗口？"
    sub_agent.full_clean()
    assert sub_agent.display_name == "食堂👩\u200d🍳"
    assert sub_agent.example_questions == "二食堂中午吃什么？\n哪里有清真窗口？"
    service = McpService(
        name="calendar",
        protocol="streamable-http",
        config={"url": "https://mcp.example.edu.cn/mcp"},
        display_name="校历\u200b\u202e",
    )
    service.full_clean()
    assert service.display_name == "校历"
    assert SubAgent.objects.count() == 1
