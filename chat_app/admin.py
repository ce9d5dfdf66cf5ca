from django.contrib import admin

from chat_app.models import AuthSession, CampusIdentity, Conversation, Message


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


@admin.register(AuthSession)
class AuthSessionAdmin(admin.ModelAdmin):
    """API login sessions. Deleting one revokes the JWT that names it (its `sid`).

    The campus token is a credential: it is never shown here, only whether there is one.
    """

    list_display = ("user", "via", "has_campus_token", "created_at", "expires_at")
    list_filter = ("via",)
    search_fields = ("user__username", "id")
    list_select_related = ("user",)
    fields = ("id", "user", "via", "roles", "has_campus_token", "created_at", "expires_at")
    readonly_fields = fields

    @admin.display(boolean=True, description="有校园令牌")
    def has_campus_token(self, obj: AuthSession) -> bool:
        return bool(obj.campus_token)

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(CampusIdentity)
class CampusIdentityAdmin(admin.ModelAdmin):
    """Which local user each campus SSO subject logs in as. Made by SSO logins only: editing
    the link would hand one person's campus login to another account."""

    list_display = ("sub", "user", "roles", "created_at", "updated_at")
    search_fields = ("sub", "user__username")
    list_select_related = ("user",)
    fields = ("sub", "user", "roles", "created_at", "updated_at")
    readonly_fields = fields

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
