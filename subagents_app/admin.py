from django.contrib import admin

from subagents_app.models import SubAgent


@admin.register(SubAgent)
class SubAgentAdmin(admin.ModelAdmin):
    list_display = ("name", "domain", "base_url", "timeout_sec", "enabled", "updated_at")
    list_filter = ("enabled", "domain")
    search_fields = ("name", "description", "base_url", "domain")
    readonly_fields = ("created_at", "updated_at")
    fieldsets = (
        (None, {"fields": ("name", "description", "enabled")}),
        ("连接", {"fields": ("base_url", "domain", "timeout_sec")}),
        ("时间", {"fields": ("created_at", "updated_at"), "classes": ("collapse",)}),
    )
