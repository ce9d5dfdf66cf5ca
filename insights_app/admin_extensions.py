"""What insights_app adds to other apps' admin pages: routing on the catalog's pages ("用本次修改检查路由"
on the agent, sub-agent and MCP service change pages, "运行路由用例" on the agent's, a button and an
action, and an agent's rollback checked against its routing cases first), and "保存为路由用例" on a
stored message.

agents_app and subagents_app know nothing of routing cases (nothing depends on insights_app):
their admins are extended through the front door, admin extensions registered for their models
in InsightsAppConfig.ready() (campus_agent/base/admin_extensions.py).
"""
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core import signing
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse

from agents_app.models import Agent, McpService
from campus_agent.base.admin_extensions import AdminExtension, admin_extension_register
from campus_agent.base.history import history_date_text, history_restored
from chat_app.models import Message
from insights_app.models import RoutingCheck
from insights_app.routing.ask import RoutingUnavailable
from insights_app.routing.checks import CheckSettings, routing_check_run
from insights_app.routing.preview import (
    preview_pairs_agent,
    preview_pairs_mcp_service,
    preview_pairs_sub_agent,
    routing_preview,
)
from subagents_app.models import SubAgent

PREVIEW_TITLE = "用本次修改检查路由（未保存）"
PREVIEW_INVALID = "表单有错误，无法检查：请回到编辑页改正后再试。"
NO_CASES_TEXT = "没有受影响的路由用例：这次修改涉及的智能体还没有启用的用例。"
CHECK_DONE_TEXT = "“{agent}”路由检查完成：{passed}/{total} 个用例通过，新失败 {regressed} 个，新通过 {fixed} 个。"
CHECK_NO_CASES = "“{agent}”没有启用的路由用例。"
ROLLBACK_TITLE = "回滚“{agent}”到 {date} 的版本：先检查路由"
ROLLBACK_NO_CASES = "该智能体没有启用的路由用例，无法事先检查；确认后回滚。"
ROLLBACK_BREAKS = "回滚后有 {count} 个路由用例会失败。仍要回滚，请勾选下面的确认框。"
ROLLBACK_UNCHECKED = "无法检查路由（{error}）。仍要回滚，请勾选下面的确认框。"
ROLLBACK_ACCEPT_MISSING = "请勾选确认框：回滚后有用例会失败（或无法检查）。"
# The confirm page's token: the preview ran for this version against the agent as it is (its
# latest history entry), by this staff member; older than this, the preview is run again.
ROLLBACK_HELP = "先用该版本重放本智能体的路由用例并显示结果，确认后才回滚；回滚本身也记入历史。"
ROLLBACK_PREVIEW_SALT = "insights_app.history_rollback"
ROLLBACK_PREVIEW_MAX_AGE = 3600


SAVE_AS_CASE = "保存为路由用例"
PREVIEW_BUTTON = "用本次修改检查路由"
PREVIEW_BUTTON_HELP = "用未保存的修改重放相关智能体的路由用例，看哪些用例会变；不会保存，也不会执行任何工具。"
CHECK_BUTTON = "运行路由用例"


def _url_name(model_admin, view: str) -> str:
    return f"{model_admin.opts.app_label}_{model_admin.opts.model_name}_{view}"


class RoutingPreview(AdminExtension):
    """The preview view (POST of the unsaved change form) and the button that sends it."""

    def urls(self, model_admin):
        def view(request, object_id):
            return self.preview_view(model_admin, request, object_id)

        return [path("<path:object_id>/routing-preview/", model_admin.admin_site.admin_view(view),
                     name=_url_name(model_admin, "routing_preview"))]

    def change_form_buttons(self, model_admin, request, obj):
        if obj is None or not model_admin.has_change_permission(request, obj):
            return {}
        url = reverse(f"admin:{_url_name(model_admin, 'routing_preview')}", args=[obj.pk])
        return {"submit_rows": [{"label": PREVIEW_BUTTON, "url": url, "help": PREVIEW_BUTTON_HELP,
                                 "name": "_routing_preview"}]}

    def preview_pairs(self, form):
        raise NotImplementedError

    def preview_view(self, model_admin, request, object_id):
        """Validates the posted form like a save would, then checks routing with it; saves nothing."""
        if request.method != "POST":
            # Opened by address (a reload, a pasted link): the page with the button, not a blank 405.
            opts = model_admin.opts
            return HttpResponseRedirect(reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[object_id]))
        obj = model_admin.get_object(request, unquote(object_id))
        if obj is None:
            raise Http404
        if not model_admin.has_change_permission(request, obj):
            raise PermissionDenied
        form = model_admin.get_form(request, obj, change=True)(request.POST, request.FILES, instance=obj)
        opts = model_admin.opts
        context = {
            **model_admin.admin_site.each_context(request),
            "title": PREVIEW_TITLE,
            "opts": opts,
            "original": obj,
            "change_url": reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[obj.pk]),
        }
        if not form.is_valid():
            context.update(invalid=PREVIEW_INVALID, form_errors=form.errors)
        else:
            try:
                knobs = CheckSettings.resolve()
                context.update(previews=routing_preview(pairs=self.preview_pairs(form), knobs=knobs),
                               knobs=knobs, no_cases=NO_CASES_TEXT)
            except RoutingUnavailable as exc:
                context["invalid"] = str(exc)
        return TemplateResponse(request, "admin/insights_app/routing_preview.html", context)


class SubAgentRouting(RoutingPreview):
    def preview_pairs(self, form):
        return preview_pairs_sub_agent(edited=form.instance)


class McpServiceRouting(RoutingPreview):
    def preview_pairs(self, form):
        return preview_pairs_mcp_service(edited=form.instance)


def _routing_check(request, agent: Agent) -> RoutingCheck | None:
    try:
        check = routing_check_run(agent=agent, knobs=CheckSettings.resolve(), trigger=RoutingCheck.Trigger.ADMIN,
                                  user=request.user)
    except RoutingUnavailable as exc:
        messages.error(request, str(exc))
        return None
    if check is None:
        messages.info(request, CHECK_NO_CASES.format(agent=agent.name))
        return None
    text = CHECK_DONE_TEXT.format(agent=agent.name, passed=check.passed, total=check.total,
                                  regressed=check.regressed, fixed=check.fixed)
    level = messages.error if check.regressed else messages.warning if check.passed < check.total else messages.success
    level(request, text)
    return check


@admin.action(description="运行路由用例（问模型，不执行工具）", permissions=["change"])
def routing_cases_run(model_admin, request, queryset):
    checks = [check for agent in queryset if (check := _routing_check(request, agent))]
    if len(checks) == 1 and request.user.has_perm("insights_app.view_routingcheck"):
        return HttpResponseRedirect(reverse("admin:insights_app_routingcheck_change", args=[checks[0].pk]))
    return None


class AgentRouting(RoutingPreview):
    """The preview, the "运行路由用例" button and action, and the rollback checked first."""

    def preview_pairs(self, form):
        data = form.cleaned_data
        return preview_pairs_agent(
            edited=form.instance,
            mcp_services=data["mcp_services"] if "mcp_services" in form.fields else None,
            sub_agents=data["sub_agents"] if "sub_agents" in form.fields else None,
        )

    def urls(self, model_admin):
        def view(request, object_id):
            return self.check_view(model_admin, request, object_id)

        return [path("<path:object_id>/routing-check/", model_admin.admin_site.admin_view(view),
                     name="agents_app_agent_routing_check"), *super().urls(model_admin)]

    def actions(self, model_admin):
        return [routing_cases_run]

    def change_form_buttons(self, model_admin, request, obj):
        buttons = super().change_form_buttons(model_admin, request, obj)
        if obj is not None and model_admin.has_change_permission(request, obj):
            url = reverse("admin:agents_app_agent_routing_check", args=[obj.pk])
            buttons["tools"] = [{"label": CHECK_BUTTON, "url": url}]
        return buttons

    def check_view(self, model_admin, request, object_id):
        """The agent page's "运行路由用例" button: POST only; shows the stored check."""
        if request.method != "POST":
            # Opened by address (a reload, a pasted link): the page with the button, not a blank 405.
            return HttpResponseRedirect(reverse("admin:agents_app_agent_change", args=[object_id]))
        agent = model_admin.get_object(request, unquote(object_id))
        if agent is None:
            raise Http404
        if not model_admin.has_change_permission(request, agent):
            raise PermissionDenied
        check = _routing_check(request, agent)
        if check is None or not request.user.has_perm("insights_app.view_routingcheck"):
            return HttpResponseRedirect(reverse("admin:agents_app_agent_change", args=[agent.pk]))
        return HttpResponseRedirect(reverse("admin:insights_app_routingcheck_change", args=[check.pk]))

    # --- rollback from the history (campus_agent.base.admin_history): the cases first

    def history_form_context(self, model_admin, request, object_id):
        return {"rollback_help": ROLLBACK_HELP}

    @staticmethod
    def _rollback_state(request, agent: Agent, record) -> str:
        latest = agent.history.order_by("-history_date", "-history_id").values_list("history_id", flat=True).first()
        return f"{request.user.pk}:{record.history_id}:{latest}"

    def history_rollback_confirm(self, model_admin, request, obj, record, fields):
        """An agent's rollback shows its routing cases against the rolled-back version first (the
        "用本次修改检查路由" preview, nothing saved); the POST of that page rolls back. When cases would
        fail, or routing cannot be checked, it needs the box "仍要回滚" ticked too."""
        restored = history_restored(record=record, obj=obj, fields=fields)
        try:
            restored.instance.full_clean()
        except ValidationError:
            return None  # the rollback itself says why it cannot be done
        token = request.POST.get("preview_token")
        if token:
            try:
                seen = signing.loads(token, salt=ROLLBACK_PREVIEW_SALT, max_age=ROLLBACK_PREVIEW_MAX_AGE)
            except signing.BadSignature:
                seen = None
            if seen and seen.get("state") == self._rollback_state(request, obj, record):
                if not seen.get("risky") or request.POST.get("accept_regressions"):
                    return None
                messages.error(request, ROLLBACK_ACCEPT_MISSING)
        return self._rollback_preview_page(model_admin, request, obj, record, restored)

    def _rollback_preview_page(self, model_admin, request, agent: Agent, record, restored):
        links = restored.links
        context = {
            **model_admin.admin_site.each_context(request),
            "title": ROLLBACK_TITLE.format(agent=agent.name, date=history_date_text(record)),
            "opts": model_admin.opts, "original": agent, "record": record,
            "change_url": reverse("admin:agents_app_agent_change", args=[agent.pk]),
            "diff_url": reverse("admin:agents_app_agent_simple_history", args=[agent.pk, record.history_id]),
            "rollback_url": reverse("admin:agents_app_agent_history_rollback", args=[agent.pk, record.history_id]),
            "missing": restored.missing,
        }
        risky = False
        try:
            knobs = CheckSettings.resolve()
            pairs = preview_pairs_agent(
                edited=restored.instance,
                mcp_services=McpService.objects.filter(pk__in=links["mcp_services"]) if "mcp_services" in links else None,
                sub_agents=SubAgent.objects.filter(pk__in=links["sub_agents"]) if "sub_agents" in links else None,
            )
            previews = routing_preview(pairs=pairs, knobs=knobs)
            breaks = sum(len(preview.breaks) for preview in previews)
            risky = breaks > 0
            context.update(previews=previews, knobs=knobs, no_cases=ROLLBACK_NO_CASES,
                           warning=ROLLBACK_BREAKS.format(count=breaks) if risky else "")
        except RoutingUnavailable as exc:
            risky = True
            context.update(invalid=str(exc), warning=ROLLBACK_UNCHECKED.format(error=exc))
        context.update(risky=risky, preview_token=signing.dumps(
            {"state": self._rollback_state(request, agent, record), "risky": risky}, salt=ROLLBACK_PREVIEW_SALT))
        return TemplateResponse(request, "admin/insights_app/history_rollback_confirm.html", context)


class SaveAsCase(AdminExtension):
    """The link on a stored question (conversation page) or a rated answer (feedback page)."""

    def links(self, obj: Message) -> list[tuple[str, str]]:
        if obj.role == Message.Role.TOOL or obj.meta.get("tool_calls"):
            return []
        return [(SAVE_AS_CASE, reverse("admin:insights_app_routingcase_add") + "?" + urlencode({"from_message": obj.pk}))]


def admin_extensions_register() -> None:
    """The routing checks on the catalog's admin pages, the link on stored messages
    (InsightsAppConfig.ready())."""
    admin_extension_register(Agent, AgentRouting())
    admin_extension_register(SubAgent, SubAgentRouting())
    admin_extension_register(McpService, McpServiceRouting())
    admin_extension_register(Message, SaveAsCase())
