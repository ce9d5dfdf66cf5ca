from django import forms
from django.contrib import admin

from agents_app.models import Agent, McpService


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
    readonly_fields = ("created_at", "updated_at")
    fieldsets = (
        (None, {"fields": ("name", "slug", "enabled", "is_default")}),
        ("模型", {"fields": ("system_prompt", "model", "temperature", "max_tool_rounds")}),
        ("工具", {"fields": ("mcp_services", "sub_agents")}),
        ("时间", {"fields": ("created_at", "updated_at"), "classes": ("collapse",)}),
    )

    @admin.display(description="模型")
    def effective_model(self, obj: Agent) -> str:
        return obj.effective_model


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
