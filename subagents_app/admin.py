from django.contrib import admin, messages

from campus_agent.circuit import circuit_close, circuit_status, circuit_status_text
from subagents_app.client import subagent_circuit_key
from subagents_app.health import subagent_health_check
from subagents_app.models import SubAgent

CIRCUIT_CLOSED_TEXT = "子 Agent {name} 已恢复应答，熔断已解除。"

# The gateway sends students' campus tokens to the base URL: only superusers may point it
# somewhere (other staff see it read-only; `import_subagents` needs shell access, already trusted).
SUPERUSER_ONLY_FIELDS = ("base_url",)


@admin.register(SubAgent)
class SubAgentAdmin(admin.ModelAdmin):
    list_display = (
        "name", "display_name", "domain", "base_url", "timeout_sec", "approval_policy", "enabled", "circuit", "updated_at",
    )
    list_filter = ("enabled", "domain", "approval_policy")
    search_fields = ("name", "display_name", "description", "base_url", "domain")
    readonly_fields = ("created_at", "updated_at")
    actions = ["health_check"]
    fieldsets = (
        (None, {"fields": ("name", "display_name", "description", "enabled")}),
        ("页面", {"fields": ("example_questions",)}),
        ("连接", {"fields": ("base_url", "domain", "timeout_sec")}),
        ("审批", {"fields": ("approval_policy",)}),
        ("时间", {"fields": ("created_at", "updated_at"), "classes": ("collapse",)}),
    )

    def get_readonly_fields(self, request, obj=None):
        fields = super().get_readonly_fields(request, obj)
        if request.user.is_superuser:
            return fields
        # Left out of the form, so a POST that carries them anyway changes nothing.
        return (*fields, *SUPERUSER_ONLY_FIELDS)

    def has_add_permission(self, request) -> bool:
        # A new sub-agent needs a base URL, which only superusers may set.
        return request.user.is_superuser and super().has_add_permission(request)

    @admin.display(description="熔断状态")
    def circuit(self, obj: SubAgent) -> str:
        return circuit_status_text(circuit_status(source=subagent_circuit_key(obj)))  # the cache only, no request

    @admin.action(description="健康检查（GET 服务地址/healthz；正常则解除熔断）")
    def health_check(self, request, queryset):
        for sub_agent in queryset.order_by("name"):
            result = subagent_health_check(sub_agent=sub_agent)
            self.message_user(request, result.text, messages.SUCCESS if result.ok else messages.ERROR)
            if result.ok and circuit_close(source=subagent_circuit_key(sub_agent), name=f"sub-agent {sub_agent.name}"):
                self.message_user(request, CIRCUIT_CLOSED_TEXT.format(name=sub_agent.name), messages.INFO)
