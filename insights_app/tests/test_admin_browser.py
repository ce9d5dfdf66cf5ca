"""Routing in admin, in Chromium under the admin's CSP: "用本次修改检查路由" sends the unsaved
form to a new tab that shows the case the edit breaks (the edit stays in its tab, unsaved), and
"运行路由用例" opens the stored check."""
import pytest

from insights_app.models import RoutingCheck
from insights_app.tests.helpers import CANTEEN_DESCRIPTION, route_by_description
from subagents_app.models import SubAgent
from testkit.fixtures.browser import ARTIFACTS, Remote

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

BROKEN_DESCRIPTION = "校园服务助手：各类校园问题。"


def _admin_login(browser_page, user, password) -> None:
    page = browser_page.page
    browser_page.goto("/admin/login/")
    page.fill("#id_username", user.username)
    page.fill("#id_password", password)
    page.click("input[type=submit]")
    page.wait_for_selector("#content-main")


def test_preview_an_unsaved_description(browser_page, staff_user, password, llm_settings, canteen_case,
                                        subagents_unserved):
    llm_settings.responder = route_by_description
    canteen, _ = subagents_unserved
    _admin_login(browser_page, staff_user, password)
    page = browser_page.page
    browser_page.goto(f"/admin/subagents_app/subagent/{canteen.pk}/change/")
    page.fill("#id_description", BROKEN_DESCRIPTION)

    tab, runner = page._target, page._runner

    def click_and_follow_the_new_tab():
        with tab.context.expect_page() as opened:
            tab.click("input[name=_routing_preview]")
        preview = opened.value
        preview.wait_for_selector("tr.routing-breaks")
        return preview

    preview = Remote(runner, runner.run(click_and_follow_the_new_tab))
    text = preview.text_content("#content-main")
    assert "1 个用例会失败" in text and "二食堂晚饭吃什么" in text and "没有调用 call_canteen" in text
    ARTIFACTS.mkdir(exist_ok=True)
    preview.screenshot(path=str(ARTIFACTS / "routing-preview.png"))

    assert page.input_value("#id_description") == BROKEN_DESCRIPTION  # still there, to save or change
    assert SubAgent.objects.get(pk=canteen.pk).description == CANTEEN_DESCRIPTION
    assert not RoutingCheck.objects.exists()


def test_run_cases_button_opens_the_check(browser_page, staff_user, password, llm_settings, canteen_case,
                                          routing_agent):
    llm_settings.responder = lambda request: "不用工具"
    _admin_login(browser_page, staff_user, password)
    page = browser_page.page
    browser_page.goto(f"/admin/agents_app/agent/{routing_agent.pk}/change/")
    page.click("text=运行路由用例")
    page.wait_for_selector(".messagelist")
    check = RoutingCheck.objects.get()
    assert page.url.endswith(f"/admin/insights_app/routingcheck/{check.pk}/change/")
    assert "没有调用 call_canteen" in page.text_content("#content-main")
    browser_page.screenshot("routing-check")


def test_usage_report_with_a_date_range(browser_page, staff_user, password, user):
    from datetime import timedelta

    from django.utils import timezone

    from insights_app.models import UsageDaily

    today = timezone.localdate()
    for day, tokens in ((today, 300), (today - timedelta(days=3), 5000)):
        UsageDaily.objects.create(day=day, user=user, username=user.username, agent_name="校园小智", model="qwen-plus",
                                  turns=2, prompt_tokens=tokens, completion_tokens=0)
    _admin_login(browser_page, staff_user, password)
    page = browser_page.page
    browser_page.goto("/admin/insights_app/usagedaily/")
    assert "5300" in page.text_content(".usage-summary")
    page.fill("input[name=day__gte]", today.isoformat())
    page.click(".usage-range input[type=submit]")
    page.wait_for_url(lambda url: "day__gte" in url)
    summary = page.text_content(".usage-summary")
    assert "300" in summary and "5300" not in summary
    browser_page.screenshot("usage-report")


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_overview_link_on_the_admin_home_is_readable(browser_page, staff_user, password, scheme):
    """「运营概况 →」 was drawn in the link colour on the module header's nearly equal blue
    (rgb(65,120,147) on rgb(65,118,144)): it takes the header's own text colour (issue 42)."""
    from testkit.web.contrast import AA_NORMAL_TEXT, contrast_of

    page = browser_page.page
    page.emulate_media(color_scheme=scheme)
    _admin_login(browser_page, staff_user, password)
    browser_page.goto("/admin/")
    page.wait_for_selector("#overview-link h2 a")
    seen = contrast_of(page, "#overview-link h2 a")
    assert seen["ratio"] >= AA_NORMAL_TEXT, seen
    browser_page.screenshot(f"admin-home-{scheme}")
