"""Routing cases in admin: saved from a stored conversation or a rated answer in two clicks,
edited as plain lines, run from the agent's page; checks read with their difference."""
import re
from html import unescape

import pytest
from django.urls import reverse

from chat_app.models import Conversation, Feedback, Message
from insights_app.models import RoutingCase, RoutingCheck
from insights_app.tests.helpers import route_by_description

pytestmark = pytest.mark.django_db

ADD_URL = "/admin/insights_app/routingcase/add/"


@pytest.fixture
def misrouted(routing_agent, user) -> dict[str, Message]:
    """A conversation whose second turn sent a canteen question to the course sub-agent."""
    conversation = Conversation.objects.create(user=user, agent=routing_agent, title="吃饭")
    rows = [
        ("user", "二食堂在哪", {}),
        ("assistant", "在北区。", {}),
        ("user", "那里晚饭吃什么", {}),
        ("assistant", "", {"tool_calls": [{"id": "c1", "type": "function",
                                           "function": {"name": "call_course", "arguments": '{"message": "晚饭"}'}}]}),
        ("tool", "没有找到课程。", {"tool_call_id": "c1", "tool": "call_course", "ok": True}),
        ("assistant", "抱歉，没有找到。", {"usage": {"prompt_tokens": 10, "completion_tokens": 5}}),
    ]
    made = {}
    for seq, (role, content, meta) in enumerate(rows, start=1):
        made[f"{role}{seq}"] = Message.objects.create(
            conversation=conversation, role=role, content=content, meta=meta, seq=seq,
            agent_name=routing_agent.name if role == "assistant" else "")
    return made


def _field(html: str, name: str) -> str:
    """The text of a textarea in a rendered form."""
    found = re.search(rf'<textarea name="{name}"[^>]*>\n?(.*?)</textarea>', html, re.S)
    return unescape(found.group(1)) if found else ""


def test_save_as_case_from_a_stored_question(staff_client, misrouted, routing_agent, staff_user):
    question = misrouted["user3"]
    page = staff_client.get(f"/admin/chat_app/conversation/{question.conversation_id}/change/").content.decode()
    link = f"{ADD_URL}?from_message={question.pk}"
    assert f'<a href="{link}">保存为路由用例</a>' in page  # click 1
    assert page.count("保存为路由用例") == 2  # the two questions, not the answers or the tool row

    form = staff_client.get(link)  # the add form, pre-filled
    html = form.content.decode()
    assert _field(html, "question") == "那里晚饭吃什么"
    assert _field(html, "must_call") == "call_course"  # what the turn actually called
    assert _field(html, "history") == "用户：二食堂在哪\n助手：在北区。"
    assert form.context["adminform"].form.initial["agent"] == routing_agent.pk
    assert "这一轮实际调用了：call_course" in _field(html, "notes")

    # Staff move the wrong tool to "must not" and name the right one, then save: click 2.
    response = staff_client.post(link, {
        "agent": routing_agent.pk, "question": "那里晚饭吃什么", "history": "用户：二食堂在哪\n助手：在北区。",
        "must_call": "call_canteen", "must_not_call": "call_course", "notes": "误判给了选课", "enabled": "on",
        "source_message": str(question.pk),
        "arg_expectations-TOTAL_FORMS": "1", "arg_expectations-INITIAL_FORMS": "0",
        "arg_expectations-0-tool": "call_canteen", "arg_expectations-0-argument": "message",
        "arg_expectations-0-contains": "二食堂",
    })
    assert response.status_code == 302, response.context["adminform"].form.errors if response.context else ""
    case = RoutingCase.objects.get()
    assert (case.question, case.must_call, case.must_not_call) == ("那里晚饭吃什么", ["call_canteen"], ["call_course"])
    assert case.history == [{"role": "user", "content": "二食堂在哪"}, {"role": "assistant", "content": "在北区。"}]
    assert (case.source_message, case.created_by) == (question, staff_user)
    assert [(e.tool, e.argument, e.contains) for e in case.arg_expectations.all()] == [
        ("call_canteen", "message", "二食堂")]


def test_save_as_case_from_a_thumbs_down(staff_client, misrouted, user):
    answer = misrouted["assistant6"]
    feedback = Feedback.objects.create(message=answer, user=user, rating="down", comment="答非所问")
    page = staff_client.get(f"/admin/chat_app/feedback/{feedback.pk}/change/").content.decode()
    link = f"{ADD_URL}?from_message={answer.pk}"
    assert f'<a href="{link}">保存为路由用例</a>' in page
    html = staff_client.get(link).content.decode()
    assert _field(html, "question") == "那里晚饭吃什么"  # the question the answer replied to
    assert _field(html, "must_call") == "call_course"


def test_unknown_source_message_is_an_empty_form(staff_client):
    for value in ("not-a-uuid", "00000000-0000-0000-0000-000000000000"):
        response = staff_client.get(ADD_URL, {"from_message": value})
        assert response.status_code == 200 and _field(response.content.decode(), "question") == ""


@pytest.mark.parametrize(("changes", "error"), [
    ({"must_call": "", "must_not_call": ""}, "请至少填写一个必须调用或不得调用的工具"),
    ({"must_call": "Call Canteen"}, "工具名“Call”不对"),
    ({"must_not_call": "call_canteen"}, "同时出现在“必须调用”里：call_canteen"),
    ({"must_not_call": "*"}, "“*”表示不得调用任何工具"),
    ({"history": "二食堂在哪"}, "第 1 行应以“用户：”或“助手：”开头。"),
])
def test_case_form_validation(staff_client, routing_agent, changes, error):
    data = {"agent": routing_agent.pk, "question": "今天吃什么", "must_call": "call_canteen", "must_not_call": "",
            "enabled": "on", "arg_expectations-TOTAL_FORMS": "0", "arg_expectations-INITIAL_FORMS": "0", **changes}
    response = staff_client.post(ADD_URL, data)
    assert response.status_code == 200
    assert error in response.content.decode()
    assert not RoutingCase.objects.exists()


def test_a_case_typed_in_a_browser_keeps_lf(staff_client, routing_agent):
    """The question goes to the model as written: a browser's CRLF lines are stored with LF (issue 42)."""
    data = {"agent": routing_agent.pk, "question": "今天吃什么\r\n要便宜的", "notes": "来自\r\n误判",
            "must_call": "call_canteen", "must_not_call": "", "enabled": "on",
            "arg_expectations-TOTAL_FORMS": "0", "arg_expectations-INITIAL_FORMS": "0"}
    assert staff_client.post(ADD_URL, data).status_code == 302
    case = RoutingCase.objects.get()
    assert (case.question, case.notes) == ("今天吃什么\n要便宜的", "来自\n误判")


def test_run_cases_from_the_agent_page(staff_client, llm_settings, canteen_case, routing_agent):
    change = staff_client.get(reverse("admin:agents_app_agent_change", args=[routing_agent.pk])).content.decode()
    run_url = reverse("admin:agents_app_agent_routing_check", args=[routing_agent.pk])
    assert f'action="{run_url}"' in change and "运行路由用例" in change
    assert "列出工具" in change  # the page's own button is still there
    opened = staff_client.get(run_url)  # runs nothing: back to the agent's page
    assert (opened.status_code, opened.url) == (302, reverse("admin:agents_app_agent_change", args=[routing_agent.pk]))
    assert not RoutingCheck.objects.exists()

    llm_settings.responder = route_by_description
    response = staff_client.post(run_url)
    check = RoutingCheck.objects.get()
    assert response.status_code == 302 and response.url == reverse("admin:insights_app_routingcheck_change",
                                                                     args=[check.pk])
    assert (check.trigger, check.passed, check.total) == ("admin", 1, 1)

    llm_settings.responder = lambda request: "我不用工具"
    staff_client.post(run_url)
    latest = RoutingCheck.objects.first()
    page = staff_client.get(reverse("admin:insights_app_routingcheck_change", args=[latest.pk])).content.decode()
    assert "新失败 1 个，新通过 0 个" in page
    assert '<span class="routing-regressed">新失败</span>' in page
    assert "没有调用 call_canteen" in page and "（未调用工具）" in page
    listing = staff_client.get("/admin/insights_app/routingcheck/").content.decode()
    assert '<span class="routing-regressed">1</span>' in listing
    cases = staff_client.get("/admin/insights_app/routingcase/").content.decode()
    assert "失败 0/3" in cases


def test_run_cases_action_on_the_agent_list(staff_client, llm_settings, canteen_case, routing_agent):
    llm_settings.responder = route_by_description
    response = staff_client.post("/admin/agents_app/agent/", {
        "action": "routing_cases_run", "_selected_action": [routing_agent.pk]})
    assert response.status_code == 302
    assert RoutingCheck.objects.get().passed == 1


def test_editor_without_change_permission_cannot_run(client, canteen_case, routing_agent, django_user_model):
    from django.contrib.auth.models import Permission

    viewer = django_user_model.objects.create_user(username="viewer", password="x", is_staff=True)
    viewer.user_permissions.set(Permission.objects.filter(codename="view_agent"))
    client.force_login(viewer)
    assert client.post(reverse("admin:agents_app_agent_routing_check", args=[routing_agent.pk])).status_code == 403
    assert not RoutingCheck.objects.exists()


def test_editor_runs_cases_and_stays_on_the_agent_page(editor_client, llm_settings, canteen_case, routing_agent):
    """Catalog editors may run the cases (they may change the agent) but not read stored checks:
    they get the summary on the agent's page instead of a page they may not open."""
    llm_settings.responder = route_by_description
    response = editor_client.post(reverse("admin:agents_app_agent_routing_check", args=[routing_agent.pk]),
                                  follow=True)
    assert response.redirect_chain[-1][0] == reverse("admin:agents_app_agent_change", args=[routing_agent.pk])
    assert "路由检查完成：1/1 个用例通过" in response.content.decode()
    assert RoutingCheck.objects.get().created_by.username == "editor"
