""""用本次修改检查路由": the unsaved change form of an agent, sub-agent or MCP service is checked
against the affected agents' cases, showing which would change; nothing is saved."""
import pytest
from django.urls import reverse

from agents_app.models import Agent, McpService
from insights_app.models import RoutingCheck
from insights_app.routing.preview import BREAKS, FIXES, SAME
from insights_app.tests.helpers import CANTEEN_DESCRIPTION, form_post_data, route_by_description
from subagents_app.models import SubAgent

pytestmark = pytest.mark.django_db

BROKEN_DESCRIPTION = "校园服务助手：各类校园问题。"  # names none of the canteen words


def _preview_url(obj) -> str:
    opts = obj._meta
    return reverse(f"admin:{opts.app_label}_{opts.model_name}_routing_preview", args=[obj.pk])


def _rows(response) -> dict[str, str]:
    """question → change, for every agent previewed."""
    return {row.case.question: row.change for preview in response.context["previews"] for row in preview.rows}


@pytest.fixture
def cases(case_factory, canteen_case):
    case_factory("李老师的课还有名额吗", must_call=["call_course"])
    return canteen_case


def test_change_pages_offer_the_button(staff_client, routing_agent, subagents_unserved, mcp_service_stdio):
    canteen, _ = subagents_unserved
    for obj in (routing_agent, canteen, mcp_service_stdio):
        opts = obj._meta
        page = staff_client.get(reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[obj.pk]))
        html = page.content.decode()
        assert f'formaction="{_preview_url(obj)}"' in html and 'value="用本次修改检查路由"' in html
        assert 'formtarget="_blank"' in html
    add_page = staff_client.get(reverse("admin:subagents_app_subagent_add")).content.decode()
    assert "用本次修改检查路由" not in add_page  # nothing saved yet: no cases can involve it


def test_unsaved_description_that_breaks_a_case(staff_client, llm_settings, cases, subagents_unserved):
    canteen, _ = subagents_unserved
    llm_settings.responder = route_by_description
    response = staff_client.post(_preview_url(canteen), form_post_data(canteen, description=BROKEN_DESCRIPTION))

    assert response.status_code == 200
    assert _rows(response) == {"二食堂晚饭吃什么": BREAKS, "李老师的课还有名额吗": SAME}
    html = response.content.decode()
    assert "1 个用例会失败" in html and "会失败" in html and "没有调用 call_canteen" in html
    # Nothing was saved, nothing stored; the model saw the unsaved text, then the saved one.
    canteen.refresh_from_db()
    assert canteen.description == CANTEEN_DESCRIPTION
    assert not RoutingCheck.objects.exists()
    offered = {t["function"]["description"] for r in llm_settings.requests for t in r.tools
               if t["function"]["name"] == "call_canteen"}
    assert offered == {CANTEEN_DESCRIPTION, BROKEN_DESCRIPTION}


def test_unsaved_description_that_fixes_a_case(staff_client, llm_settings, case_factory, subagents_unserved):
    case_factory("夜宵去哪吃", must_call=["call_canteen"])
    canteen, _ = subagents_unserved
    llm_settings.responder = route_by_description
    response = staff_client.post(_preview_url(canteen),
                                 form_post_data(canteen, description=CANTEEN_DESCRIPTION + "夜宵。"))
    assert _rows(response) == {"夜宵去哪吃": FIXES}
    assert "1 个用例会通过" in response.content.decode()


def test_unticking_a_sub_agent_on_the_agent_page(staff_client, llm_settings, cases, routing_agent,
                                                 subagents_unserved):
    _, course = subagents_unserved
    llm_settings.responder = route_by_description
    response = staff_client.post(_preview_url(routing_agent), form_post_data(routing_agent, sub_agents=[course]))
    assert _rows(response) == {"二食堂晚饭吃什么": BREAKS, "李老师的课还有名额吗": SAME}
    preview = response.context["previews"][0]
    assert preview.tools_removed == ["call_canteen"]
    assert set(Agent.objects.get(pk=routing_agent.pk).sub_agents.all()) == set(subagents_unserved)


def test_a_stored_check_of_the_same_catalog_stands_for_now(staff_client, llm_settings, cases, routing_agent,
                                                           settings):
    from django.core.management import call_command

    llm_settings.responder = route_by_description
    call_command("routing_check", stdout=open("/dev/null", "w"))
    asked = len(llm_settings.requests)
    assert asked == 2 * settings.ROUTING_CHECK_REPEAT

    # Only the prompt changes: "before" comes from the stored check, only "after" asks the model.
    response = staff_client.post(_preview_url(routing_agent),
                                 form_post_data(routing_agent, system_prompt="你是食堂机器人。"))
    preview = response.context["previews"][0]
    assert preview.reused_check == RoutingCheck.objects.get()
    assert len(llm_settings.requests) == 2 * asked
    assert llm_settings.last_request.messages[0] == {"role": "system", "content": "你是食堂机器人。"}

    # A change the model never reads (the tool-round limit) asks nothing at all.
    response = staff_client.post(_preview_url(routing_agent), form_post_data(routing_agent, max_tool_rounds=3))
    assert response.context["previews"][0].unchanged_catalog
    assert len(llm_settings.requests) == 2 * asked
    assert "路由不会变" in response.content.decode()


def test_mcp_service_rename_with_keyword_routing(staff_client, settings, agent_factory, mcp_service_stdio,
                                                 mcp_pool_cleanup):
    settings.LLM_BASE_URL = ""
    agent = agent_factory(mcp_services=[mcp_service_stdio])
    from insights_app.models import RoutingCase

    RoutingCase.objects.create(agent=agent, question="what is the pid", must_call=["tools__pid"])
    response = staff_client.post(_preview_url(mcp_service_stdio), form_post_data(mcp_service_stdio, name="tools2"))
    assert _rows(response) == {"what is the pid": BREAKS}
    preview = response.context["previews"][0]
    assert preview.mode == "keyword" and "tools2__pid" in preview.tools_added
    assert McpService.objects.get(pk=mcp_service_stdio.pk).name == "tools"


def test_invalid_form_is_reported_not_checked(staff_client, llm_settings, cases, subagents_unserved):
    canteen, _ = subagents_unserved
    response = staff_client.post(_preview_url(canteen), form_post_data(canteen, description="  "))
    assert response.status_code == 200
    assert "表单有错误" in response.content.decode()
    assert llm_settings.requests == []


def test_no_affected_cases(staff_client, llm_settings, subagents_unserved):
    canteen, _ = subagents_unserved
    response = staff_client.post(_preview_url(canteen), form_post_data(canteen))
    assert "没有受影响的路由用例" in response.content.decode()


def test_post_only_and_change_permission(staff_client, client, editor_user, subagents_unserved, cases):
    canteen, _ = subagents_unserved
    opened = staff_client.get(_preview_url(canteen))  # checks nothing: back to the change page
    assert (opened.status_code, opened.url) == (302, reverse("admin:subagents_app_subagent_change", args=[canteen.pk]))
    from django.contrib.auth.models import Permission

    editor_user.user_permissions.set(Permission.objects.filter(codename="view_subagent"))
    client.force_login(editor_user)
    assert client.post(_preview_url(canteen), form_post_data(canteen)).status_code == 403
    assert SubAgent.objects.get(pk=canteen.pk).description == CANTEEN_DESCRIPTION
