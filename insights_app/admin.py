
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import OuterRef, Subquery
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from campus_agent.base.admin_records import RecordAdminMixin
from campus_agent.base.admin_text import LineEndingsAdmin
from chat_app.models import Message
from insights_app.admin_extensions import CHECK_DONE_TEXT
from insights_app.forms import RoutingCaseForm
from insights_app.models import RoutingArgExpectation, RoutingCase, RoutingCheck, RoutingOutcome, UsageDaily
from insights_app.overview import overview_today
from insights_app.routing.ask import MODEL, RoutingUnavailable
from insights_app.routing.checks import CheckSettings, routing_check_run
from insights_app.routing.prefill import routing_case_initial
from insights_app.routing.replay import passes_needed
from insights_app.usage import usage_by_agent, usage_by_day, usage_by_provider, usage_top_users, usage_totals

NOT_CHECKED = "未检查"
DATE_RANGE = ("day__gte", "day__lte")  # the usage report's 从 / 到


class ArgExpectationInline(admin.TabularInline):
    model = RoutingArgExpectation
    fields = ("tool", "argument", "contains")
    extra = 0


def _tools(names) -> str:
    return "、".join(names or []) or "—"


@admin.register(RoutingCase)
class RoutingCaseAdmin(LineEndingsAdmin, admin.ModelAdmin):
    form = RoutingCaseForm
    list_display = ("__str__", "agent", "must_call_list", "must_not_call_list", "enabled", "last_result", "updated_at")
    list_filter = ("agent", "enabled")
    search_fields = ("question", "notes")
    list_select_related = ("agent",)
    inlines = [ArgExpectationInline]
    readonly_fields = ("source_link", "created_by", "created_at", "updated_at")
    fieldsets = (
        (None, {"fields": ("agent", "question", "history", "must_call", "must_not_call", "notes", "enabled",
                           "source_message")}),
        ("来源", {"fields": ("source_link", "created_by", "created_at", "updated_at"), "classes": ("collapse",)}),
    )
    actions = ("check_agents",)

    def get_queryset(self, request):
        latest = RoutingOutcome.objects.filter(case=OuterRef("pk")).order_by("-check_run__started_at", "-id")
        return super().get_queryset(request).annotate(
            last_passed=Subquery(latest.values("passed")[:1]),
            last_passes=Subquery(latest.values("passes")[:1]),
            last_runs=Subquery(latest.values("runs")[:1]),
        )

    @admin.display(description="必须调用")
    def must_call_list(self, obj: RoutingCase) -> str:
        return _tools(obj.must_call)

    @admin.display(description="不得调用")
    def must_not_call_list(self, obj: RoutingCase) -> str:
        return _tools(obj.must_not_call)

    @admin.display(description="最近一次检查")
    def last_result(self, obj: RoutingCase) -> str:
        if getattr(obj, "last_passed", None) is None:
            return NOT_CHECKED
        label = "通过" if obj.last_passed else "失败"
        return f"{label} {obj.last_passes}/{obj.last_runs}"

    @admin.display(description="来源对话")
    def source_link(self, obj: RoutingCase) -> str:
        if obj.source_message_id is None:
            return "—"
        url = reverse("admin:chat_app_conversation_change", args=[obj.source_message.conversation_id])
        return format_html('<a href="{}">{}</a>', url, obj.source_message.conversation)

    def get_changeform_initial_data(self, request) -> dict:
        """`?from_message=<id>` (the "保存为路由用例" link): the case that message's turn suggests."""
        initial = super().get_changeform_initial_data(request)
        message_id = initial.pop("from_message", None)
        if message_id:
            try:
                message = Message.objects.select_related("conversation__user", "conversation__agent").filter(
                    pk=message_id).first()
            except ValidationError:  # not a UUID
                message = None
            if message is not None:
                initial.update(routing_case_initial(message=message))
        return initial

    def save_model(self, request, obj, form, change) -> None:
        if not change:
            obj.created_by = request.user
        super().save_model(request, obj, form, change)

    @admin.action(description="检查所选用例所属的智能体（问模型，不执行工具）")
    def check_agents(self, request, queryset) -> None:
        agents = {case.agent for case in queryset.select_related("agent")}
        for agent in sorted(agents, key=lambda a: a.slug):
            try:
                check = routing_check_run(agent=agent, knobs=CheckSettings.resolve(),
                                          trigger=RoutingCheck.Trigger.ADMIN, user=request.user)
            except RoutingUnavailable as exc:
                messages.error(request, str(exc))
                return
            if check is None:
                continue
            url = reverse("admin:insights_app_routingcheck_change", args=[check.pk])
            text = CHECK_DONE_TEXT.format(agent=agent.name, passed=check.passed, total=check.total,
                                          regressed=check.regressed, fixed=check.fixed)
            level = messages.ERROR if check.regressed else (
                messages.WARNING if check.passed < check.total else messages.SUCCESS)
            messages.add_message(request, level, format_html('{} <a href="{}">查看</a>', text, url))


class RoutingOutcomeInline(RecordAdminMixin, admin.TabularInline):
    """A check's cases, failures first: read-only, a check is a record."""

    model = RoutingOutcome
    fields = ("case_link", "result", "change_badge", "choices", "failures")
    readonly_fields = fields
    ordering = ("passed", "id")
    extra = 0
    can_delete = False

    @admin.display(description="用例")
    def case_link(self, obj: RoutingOutcome) -> str:
        question = obj.question if len(obj.question) <= 60 else obj.question[:60] + "…"
        if obj.case_id is None:
            return question
        return format_html('<a href="{}">{}</a>', reverse("admin:insights_app_routingcase_change",
                                                          args=[obj.case_id]), question)

    @admin.display(description="结果")
    def result(self, obj: RoutingOutcome) -> str:
        return f"{'通过' if obj.passed else '失败'} {obj.passes}/{obj.runs}"

    @admin.display(description="与上次相比")
    def change_badge(self, obj: RoutingOutcome) -> str:
        return format_html('<span class="routing-{}">{}</span>', obj.change, obj.get_change_display())

    @admin.display(description="每次运行选择的工具")
    def choices(self, obj: RoutingOutcome) -> str:
        runs = ("、".join(f"{t['name']}({_args(t.get('args'))})" for t in run.get("tools", [])) or "（未调用工具）"
                for run in obj.detail)
        return format_html_join(mark_safe("<br>"), "{}", ((run,) for run in runs))

    @admin.display(description="不符合之处")
    def failures(self, obj: RoutingOutcome) -> str:
        found = dict.fromkeys(f for run in obj.detail for f in run.get("failures", []))
        return format_html_join(mark_safe("<br>"), "{}", ((f,) for f in found)) or "—"


def _args(args) -> str:
    if not isinstance(args, dict):
        return ""
    text = "，".join(f"{k}={v}" for k, v in args.items())
    return text if len(text) <= 80 else text[:80] + "…"


@admin.register(RoutingCheck)
class RoutingCheckAdmin(RecordAdminMixin, admin.ModelAdmin):
    list_display = ("started_at", "agent", "router", "fingerprint", "result", "regressed_badge", "fixed", "trigger",
                    "created_by")
    list_filter = ("agent", "mode", "trigger", "started_at")
    list_select_related = ("agent", "created_by")
    date_hierarchy = "started_at"
    inlines = [RoutingOutcomeInline]
    fields = ("agent", "router", "fingerprint", "catalog_change", "result", "comparison", "rule", "tools_offered",
              "problems_text", "trigger", "created_by", "started_at", "duration_ms", "previous_link")
    readonly_fields = fields

    class Media:
        css = {"all": ["insights_app/admin.css"]}

    @admin.display(description="路由方式")
    def router(self, obj: RoutingCheck) -> str:
        return f"模型 {obj.model}" if obj.mode == MODEL else "关键词路由"

    @admin.display(description="结果")
    def result(self, obj: RoutingCheck) -> str:
        return f"{obj.passed}/{obj.total} 通过"

    @admin.display(description="新失败", ordering="regressed")
    def regressed_badge(self, obj: RoutingCheck) -> str:
        if not obj.regressed:
            return "0"
        return format_html('<span class="routing-regressed">{}</span>', obj.regressed)

    @admin.display(description="通过规则")
    def rule(self, obj: RoutingCheck) -> str:
        if obj.mode != MODEL:
            return "关键词路由每次选择相同，每个用例运行 1 次。"
        needed = passes_needed(repeat=obj.repeat, pass_rate=obj.pass_rate)
        return f"每个用例运行 {obj.repeat} 次，至少 {needed} 次选对才算通过（通过率要求 {obj.pass_rate:g}）。"

    @admin.display(description="与上次相比")
    def comparison(self, obj: RoutingCheck) -> str:
        if obj.previous_id is None:
            return "这是该智能体的第一次检查。"
        return f"新失败 {obj.regressed} 个，新通过 {obj.fixed} 个（与上一次检查相比，见下表“与上次相比”列）。"

    @admin.display(description="目录变化")
    def catalog_change(self, obj: RoutingCheck) -> str:
        previous = obj.previous
        if previous is None:
            return "—"
        if previous.fingerprint == obj.fingerprint:
            return "与上一次检查相同（提示词、模型、工具都没变）。"
        added = [t for t in obj.tools if t not in previous.tools]
        removed = [t for t in previous.tools if t not in obj.tools]
        parts = ["目录变了（提示词、模型或工具描述有改动）"]
        if added:
            parts.append("新增工具：" + "、".join(added))
        if removed:
            parts.append("移除工具：" + "、".join(removed))
        return "；".join(parts) + "。"

    @admin.display(description="连接问题")
    def problems_text(self, obj: RoutingCheck) -> str:
        """MCP services that could not be listed: their tools were not offered in this check."""
        return "；".join(obj.problems or []) or "无"

    @admin.display(description="提供的工具")
    def tools_offered(self, obj: RoutingCheck) -> str:
        return _tools(obj.tools)

    @admin.display(description="上一次检查")
    def previous_link(self, obj: RoutingCheck) -> str:
        if obj.previous_id is None:
            return "—"
        url = reverse("admin:insights_app_routingcheck_change", args=[obj.previous_id])
        return format_html('<a href="{}">{}</a>', url, obj.previous)


@admin.register(UsageDaily)
class UsageDailyAdmin(RecordAdminMixin, admin.ModelAdmin):
    """Turns and tokens per day, user, agent and model, with the filtered range's totals, top
    users and agents above the rows. A record: nobody adds, edits or deletes it here."""

    record_deletable = False

    list_display = ("day", "username", "agent_name", "provider", "model", "turns", "fallback_turns", "prompt_tokens",
                    "completion_tokens", "cached_tokens", "total")
    list_filter = ("day", ("agent_name", admin.AllValuesFieldListFilter), ("provider", admin.AllValuesFieldListFilter),
                   ("model", admin.AllValuesFieldListFilter))
    search_fields = ("username",)
    date_hierarchy = "day"
    list_per_page = 100

    class Media:
        css = {"all": ["insights_app/admin.css"]}

    @admin.display(description="合计 tokens")
    def total(self, obj: UsageDaily) -> int:
        return obj.total_tokens

    def get_urls(self):
        overview = self.admin_site.admin_view(self.overview_view)
        return [path("overview/", overview, name="insights_app_overview"), *super().get_urls()]

    def overview_view(self, request):
        """运营概况: today at a glance (insights_app/overview.py), for staff who may see usage."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        context = {**self.admin_site.each_context(request), "title": "运营概况", "overview": overview_today(),
                   "opts": self.model._meta}
        return TemplateResponse(request, "admin/insights_app/overview.html", context)

    def changelist_view(self, request, extra_context=None):
        # The date range form sends both fields; an empty one means "no bound", not a bad date.
        if any(request.GET.get(key) == "" for key in DATE_RANGE):
            kept = request.GET.copy()
            for key in DATE_RANGE:
                if kept.get(key) == "":
                    del kept[key]
            return HttpResponseRedirect(f"{request.path}?{kept.urlencode()}")
        response = super().changelist_view(request, extra_context=extra_context)
        changelist = getattr(response, "context_data", {}).get("cl") if hasattr(response, "context_data") else None
        if changelist is None:  # a redirect (e.g. an invalid filter)
            return response
        rows = changelist.queryset
        response.context_data.update(
            usage_totals=usage_totals(rows=rows),
            usage_top_users=usage_top_users(rows=rows),
            usage_by_agent=usage_by_agent(rows=rows),
            usage_by_provider=usage_by_provider(rows=rows),
            usage_by_day=usage_by_day(rows=rows)[:31],
            day_from=request.GET.get(DATE_RANGE[0], ""),
            day_to=request.GET.get(DATE_RANGE[1], ""),
        )
        return response
