"""Admin for A2A sub-agents: the Agent Card shown (escaped) after a save and by an action, the
description made from its skills, the health check reading the card, and hostile cards answered
with a message, never a 500. Opening a page reads no card (docs/operations.md)."""
import re

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse
from django.utils.html import escape

from subagents_app.a2a_card import FOREIGN_URL_TEXT, NOT_JSON_TEXT, TOO_LARGE_TEXT
from subagents_app.models import SubAgent
from testkit.subagents.a2a_agent import HOSTILE_NAME, SKILL
from testkit.web.admin_forms import admin_action_run, admin_form_data

pytestmark = pytest.mark.django_db

ADD_URL = reverse("admin:subagents_app_subagent_add")


def change_url(row: SubAgent) -> str:
    return reverse("admin:subagents_app_subagent_change", args=[row.pk])


def show_card(client, *rows) -> list[tuple[str, str]]:
    return admin_action_run(client, changelist="admin:subagents_app_subagent_changelist", action="show_agent_card",
                            objects=rows)


def add_a2a(client, base_url: str, **fields):
    values = {"name": "library", "description": "", "protocol": "a2a", "base_url": base_url, "timeout_sec": 10}
    data = admin_form_data(client.get(ADD_URL), **{**values, **fields})
    return client.post(ADD_URL, data)


def test_superuser_adds_an_a2a_agent_by_url_and_its_skills_become_the_description(staff_client, a2a_server):
    response = add_a2a(staff_client, a2a_server.url("stream"))

    assert response.status_code == 302
    row = SubAgent.objects.get(name="library")
    assert row.protocol == SubAgent.Protocol.A2A
    assert row.description.startswith("测试图书馆：测试用 A2A 图书馆助手")
    assert f"- {SKILL.name}：{SKILL.description}（例如：{SKILL.examples[0]}）" in row.description


def test_a_description_staff_wrote_is_kept(staff_client, a2a_server):
    assert add_a2a(staff_client, a2a_server.url("stream"), description="图书馆开放时间。关键词：图书馆").status_code == 302
    assert SubAgent.objects.get(name="library").description == "图书馆开放时间。关键词：图书馆"


def test_the_save_shows_the_card_it_read(staff_client, a2a_server):
    response = add_a2a(staff_client, a2a_server.url("stream"))
    [(level, text)] = [(m.level_tag, m.message) for m in get_messages(response.wsgi_request)
                       if "Agent Card" in m.message]
    assert level == "success" and "测试图书馆" in text and SKILL.description in text


def test_action_shows_the_card(staff_client, a2a_sub_agent_factory, canteen, a2a_server):
    rows = [a2a_sub_agent_factory("stream"), a2a_sub_agent_factory("bearer", name="lib-b"), canteen]
    before = len(a2a_server.requests)
    assert staff_client.get(change_url(rows[0])).status_code == 200
    assert len(a2a_server.requests) == before  # opening a page connects to nothing
    found = show_card(staff_client, *rows)
    assert found[0][0] == "info" and "canteen 不是 A2A 协议" in found[0][1]
    assert found[1][0] == "success" and "lib-b" in found[1][1] and "要求 Bearer 认证：是" in found[1][1]
    text = found[2][1]
    assert "测试图书馆" in text and SKILL.name in text and SKILL.description in text
    assert "流式输出：支持" in text and "要求 Bearer 认证：否" in text


def test_card_values_are_escaped(staff_client, a2a_sub_agent_factory):
    row = a2a_sub_agent_factory("html")
    response = staff_client.post(reverse("admin:subagents_app_subagent_changelist"),
                                 {"action": "show_agent_card", "_selected_action": [row.pk]}, follow=True)
    html = response.content.decode()
    assert response.status_code == 200 and "流式输出：不支持" in html
    assert HOSTILE_NAME not in html and escape(HOSTILE_NAME) in html
    assert "<img src=x" not in html


@pytest.mark.parametrize("variant, message", [
    ("notjson", NOT_JSON_TEXT),
    ("huge", TOO_LARGE_TEXT),
    ("odd", "Agent Card 的内容不符合 A2A 规范"),
    ("nocard", "HTTP 404"),
])
def test_hostile_cards_give_a_message_not_a_500(staff_client, a2a_server, variant, message):
    response = add_a2a(staff_client, a2a_server.url(variant))
    assert response.status_code == 200  # the form again, with the reason
    assert message in response.content.decode() and "请手动填写描述" in response.content.decode()
    assert not SubAgent.objects.exists()
    row = SubAgent.objects.create(name=f"lib-{variant}", description="图书馆", protocol="a2a",
                                  base_url=a2a_server.url(variant))
    [(level, text)] = show_card(staff_client, row)
    assert level == "warning" and message in text


def test_unreachable_agent_on_add(staff_client, unused_tcp_port):
    response = add_a2a(staff_client, f"http://127.0.0.1:{unused_tcp_port}")
    assert response.status_code == 200 and "无法获取 Agent Card" in response.content.decode()


def test_seed_contract_sub_agents_still_need_a_description(staff_client):
    data = admin_form_data(staff_client.get(ADD_URL), name="canteen", description="", base_url="http://canteen:8000",
                           timeout_sec=10)
    response = staff_client.post(ADD_URL, data)
    assert response.status_code == 200 and "必填" in response.content.decode()


def test_editor_sees_protocol_read_only(editor_client, a2a_sub_agent_factory):
    form = editor_client.get(change_url(a2a_sub_agent_factory("stream"))).context["adminform"].form
    assert "protocol" not in form.fields and "base_url" not in form.fields


def test_health_check_reads_the_card(staff_client, a2a_sub_agent_factory, a2a_server):
    rows = [a2a_sub_agent_factory("stream", name="a-ok"), a2a_sub_agent_factory("foreign", name="b-foreign"),
            a2a_sub_agent_factory("notjson", name="c-notjson")]
    found = admin_action_run(staff_client, changelist="admin:subagents_app_subagent_changelist",
                             action="health_check", objects=rows)
    assert found[0][0] == "success"
    assert re.fullmatch(r"子 Agent a-ok：Agent Card 正常（测试图书馆，支持流式，\d+ ms）", found[0][1])
    assert found[1] == ("error", "子 Agent b-foreign：Agent Card 可以读取，但"
                        + FOREIGN_URL_TEXT.format(url="http://127.0.0.2:9/rpc"))
    assert found[2] == ("error", f"子 Agent c-notjson：{NOT_JSON_TEXT}")
