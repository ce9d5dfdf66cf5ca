from django.contrib import admin

from chat_app.models import Conversation, Message


class MessageInline(admin.TabularInline):
    """History is a record: staff read it, nobody edits it here."""

    model = Message
    fields = ("created_at", "role", "content", "meta", "agent_name", "request_id")
    readonly_fields = fields
    ordering = ("created_at", "seq")
    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Conversation)
class ConversationAdmin(admin.ModelAdmin):
    list_display = ("title", "user", "agent", "hint_domain", "updated_at")
    list_filter = ("agent",)
    search_fields = ("title", "user__username", "id")
    list_select_related = ("user", "agent")
    readonly_fields = ("id", "user", "agent", "hint_domain", "created_at", "updated_at")
    inlines = [MessageInline]
