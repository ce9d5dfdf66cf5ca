from asgiref.sync import async_to_sync
from django import forms
from django.contrib import admin, messages
from django.utils.html import format_html, format_html_join

from agents_app.models import Agent, McpService

TOOL_DESCRIPTION_PREVIEW = 80


def _preview(text: str) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= TOOL_DESCRIPTION_PREVIEW else flat[:TOOL_DESCRIPTION_PREVIEW] + "…"


class AgentForm(forms.ModelForm):
    class Meta:
        model = Agent
        fields = "__all__"
        widgets = {
            "system_prompt": forms.Textarea(attrs={"rows": 20, "cols": 100, "style": "font-family: monospace;"}),
        }


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    form = AgentForm
    list_display = ("name", "slug", "effective_model", "is_default", "enabled", "max_tool_rounds", "updated_at")
    list_filter = ("enabled", "is_default")
    search_fields = ("name", "slug", "system_prompt")
    prepopulated_fields = {"slug": ("name",)}
    filter_horizontal = ("mcp_services", "sub_agents")
    readonly_fields = ("offered_tools", "created_at", "updated_at")
    fieldsets = (
        (None, {"fields": ("name", "slug", "enabled", "is_default")}),
        ("模型", {"fields": ("system_prompt", "model", "temperature", "max_tool_rounds")}),
        ("工具", {"fields": ("mcp_services", "sub_agents", "offered_tools")}),
        ("时间", {"fields": ("created_at", "updated_at"), "classes": ("collapse",)}),
    )

    @admin.display(description="模型")
    def effective_model(self, obj: Agent) -> str:
        return obj.effective_model

    @admin.display(description="模型将看到的工具")
    def offered_tools(self, obj: Agent) -> str:
        """Exactly what the next turn offers (same naming code as the runtime); services that
        cannot be reached are listed with their reason instead of silently missing."""
        if obj.pk is None:
            return "保存后显示。"
        from agents_app.runtime.tools import tools_for_agent

        problems: list[str] = []
        tools = async_to_sync(tools_for_agent)(obj, pooled=False, problems=problems)
        rows = format_html_join("", "<li><code>{}</code> — {}</li>", ((t.name, _preview(t.description)) for t in tools))
        issues = format_html_join("", '<li style="color:#ba2121">连接失败 {}</li>', ((p,) for p in problems))
        if not tools and not problems:
            return "没有可用工具（未选择已启用的 MCP 服务或子 Agent）。"
        return format_html("<ul>{}{}</ul>", rows, issues)


class McpServiceForm(forms.ModelForm):
    class Meta:
        model = McpService
        fields = "__all__"
        widgets = {"config": forms.Textarea(attrs={"rows": 8, "cols": 100, "style": "font-family: monospace;"})}


@admin.register(McpService)
class McpServiceAdmin(admin.ModelAdmin):
    form = McpServiceForm
    list_display = ("name", "protocol", "enabled", "timeout_sec", "updated_at")
    list_filter = ("protocol", "enabled")
    search_fields = ("name",)
    readonly_fields = ("created_at", "updated_at")
    actions = ("list_tools",)

    @admin.action(description="列出工具（测试连接）")
    def list_tools(self, request, queryset) -> None:
        from agents_app.mcp.pool import McpUnavailable
        from agents_app.mcp.tools import mcp_service_probe
        from agents_app.runtime.tools import tool_name_normalise

        for service in queryset:
            try:
                infos = async_to_sync(mcp_service_probe)(service=service)
            except McpUnavailable as exc:
                messages.error(request, f"“{service.name}” 连接失败：{exc}")
                continue
            names = "；".join(
                f"{tool_name_normalise(f'{service.name}__{i.name}')}（{_preview(i.description)}）" for i in infos
            )
            messages.success(request, f"“{service.name}” 共 {len(infos)} 个工具：{names or '（无）'}")
