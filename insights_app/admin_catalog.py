"""Routing on the catalog's own admin pages: "用本次修改检查路由" on the agent, sub-agent and MCP
service change pages, and "运行路由用例" on the agent's.

agents_app and subagents_app know nothing of routing cases (nothing depends on insights_app), so
their registered ModelAdmins are extended from here: each is re-registered as a subclass that
adds the views, and whose change form template extends the one the page had.
"""
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.loader import select_template
from django.template.response import TemplateResponse
from django.urls import path, reverse

from agents_app.models import Agent, McpService
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


class RoutingPreviewMixin:
    """The preview view (POST of the unsaved change form) and the button that sends it."""

    change_form_template = "admin/insights_app/routing_change_form.html"
    _routing_base_template: str | None = None  # the page's own change form template

    def get_urls(self):
        opts = self.opts
        own = [
            path(
                "<path:object_id>/routing-preview/",
                self.admin_site.admin_view(self.routing_preview_view),
                name=f"{opts.app_label}_{opts.model_name}_routing_preview",
            )
        ]
        return own + super().get_urls()  # before the change view's catch-all

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        opts = self.opts
        base = [self._routing_base_template] if self._routing_base_template else [
            f"admin/{opts.app_label}/{opts.model_name}/change_form.html",
            f"admin/{opts.app_label}/change_form.html",
            "admin/change_form.html",
        ]
        context["routing_base_template"] = select_template(base).template
        if change and obj is not None and self.has_change_permission(request, obj):
            context["routing_preview_url"] = reverse(
                f"admin:{opts.app_label}_{opts.model_name}_routing_preview", args=[obj.pk]
            )
        return super().render_change_form(request, context, add=add, change=change, form_url=form_url, obj=obj)

    def routing_preview_pairs(self, form):
        raise NotImplementedError

    def routing_preview_view(self, request, object_id):
        """Validates the posted form like a save would, then checks routing with it; saves nothing."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            raise Http404
        if not self.has_change_permission(request, obj):
            raise PermissionDenied
        form = self.get_form(request, obj, change=True)(request.POST, request.FILES, instance=obj)
        context = {
            **self.admin_site.each_context(request),
            "title": PREVIEW_TITLE,
            "opts": self.opts,
            "original": obj,
            "change_url": reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_change", args=[obj.pk]),
        }
        if not form.is_valid():
            context.update(invalid=PREVIEW_INVALID, form_errors=form.errors)
        else:
            try:
                knobs = CheckSettings.resolve()
                context.update(previews=routing_preview(pairs=self.routing_preview_pairs(form), knobs=knobs),
                               knobs=knobs, no_cases=NO_CASES_TEXT)
            except RoutingUnavailable as exc:
                context["invalid"] = str(exc)
        return TemplateResponse(request, "admin/insights_app/routing_preview.html", context)


class AgentRoutingMixin(RoutingPreviewMixin):
    def routing_preview_pairs(self, form):
        data = form.cleaned_data
        return preview_pairs_agent(
            edited=form.instance,
            mcp_services=data["mcp_services"] if "mcp_services" in form.fields else None,
            sub_agents=data["sub_agents"] if "sub_agents" in form.fields else None,
        )

    def get_urls(self):
        opts = self.opts
        own = [
            path(
                "<path:object_id>/routing-check/",
                self.admin_site.admin_view(self.routing_check_view),
                name=f"{opts.app_label}_{opts.model_name}_routing_check",
            )
        ]
        return own + super().get_urls()

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        if change and obj is not None and self.has_change_permission(request, obj):
            context["routing_check_url"] = reverse("admin:agents_app_agent_routing_check", args=[obj.pk])
        return super().render_change_form(request, context, add=add, change=change, form_url=form_url, obj=obj)

    def _routing_check(self, request, agent: Agent) -> RoutingCheck | None:
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
    def routing_cases_run(self, request, queryset):
        checks = [check for agent in queryset if (check := self._routing_check(request, agent))]
        if len(checks) == 1 and request.user.has_perm("insights_app.view_routingcheck"):
            return HttpResponseRedirect(reverse("admin:insights_app_routingcheck_change", args=[checks[0].pk]))
        return None

    def routing_check_view(self, request, object_id):
        """The agent page's "运行路由用例" button: POST only; shows the stored check."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        agent = self.get_object(request, unquote(object_id))
        if agent is None:
            raise Http404
        if not self.has_change_permission(request, agent):
            raise PermissionDenied
        check = self._routing_check(request, agent)
        if check is None or not request.user.has_perm("insights_app.view_routingcheck"):
            return HttpResponseRedirect(reverse("admin:agents_app_agent_change", args=[agent.pk]))
        return HttpResponseRedirect(reverse("admin:insights_app_routingcheck_change", args=[check.pk]))


class SubAgentRoutingMixin(RoutingPreviewMixin):
    def routing_preview_pairs(self, form):
        return preview_pairs_sub_agent(edited=form.instance)


class McpServiceRoutingMixin(RoutingPreviewMixin):
    def routing_preview_pairs(self, form):
        return preview_pairs_mcp_service(edited=form.instance)


def _extend(model, mixin, **attrs) -> None:
    base = type(admin.site.get_model_admin(model))
    extended = type(
        f"Routing{base.__name__}",
        (mixin, base),
        {"__module__": __name__, "_routing_base_template": base.change_form_template, **attrs},
    )
    admin.site.unregister(model)
    admin.site.register(model, extended)


def catalog_admins_extend() -> None:
    agent_actions = tuple(admin.site.get_model_admin(Agent).actions or ())
    _extend(Agent, AgentRoutingMixin, actions=(*agent_actions, "routing_cases_run"))
    _extend(SubAgent, SubAgentRoutingMixin)
    _extend(McpService, McpServiceRoutingMixin)
