
from django.contrib import admin, messages
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from campus_agent.base.admin_extensions import admin_links
from campus_agent.base.admin_records import RecordAdminMixin
from chat_app.accounts.api_keys import api_keys_revoke_by_staff
from chat_app.models import (
    ApiKey,
    AuthSession,
    CampusGroupGrant,
    CampusIdentity,
    Conversation,
    Feedback,
    GroupLimits,
    GroupMapping,
    Message,
    Wait,
)


def message_links(message: Message) -> str:
    """The links other apps offer on a stored message (insights_app: "保存为路由用例"), registered as
    admin extensions of Message in their AppConfig.ready(): this module imports none of them."""
    return format_html_join(" ", '<a href="{}">{}</a>', ((url, label) for label, url in admin_links(message)))


class MessageInline(RecordAdminMixin, admin.TabularInline):
    """History is a record: staff read it, nobody edits it here."""

    record_deletable = False
    model = Message
    fields = ("created_at", "role", "content", "meta", "superseded", "agent_name", "request_id", "links")
    readonly_fields = fields
    ordering = ("created_at", "seq")

    extra = 0
    can_delete = False
    show_change_link = False

    @admin.display(description="操作")
    def links(self, obj: Message) -> str:
        return message_links(obj) if obj.role == Message.Role.USER else ""


@admin.register(Conversation)
class ConversationAdmin(admin.ModelAdmin):
    list_display = ("title", "user", "agent", "hint_domain", "updated_at")
    list_filter = ("agent",)
    search_fields = ("title", "user__username", "id")
    list_select_related = ("user", "agent")
    readonly_fields = ("id", "user", "agent", "hint_domain", "created_at", "updated_at")
    inlines = [MessageInline]


@admin.register(AuthSession)
class AuthSessionAdmin(RecordAdminMixin, admin.ModelAdmin):
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


@admin.register(ApiKey)
class ApiKeyAdmin(RecordAdminMixin, admin.ModelAdmin):
    """Students' personal API keys (docs/design.md#other-clients). Staff see whose key it is, its first characters
    (to match a leak report) and its dates, and can revoke keys (the action): a revoked key is
    refused at once on every worker. The secret itself is stored as a digest only, shown nowhere;
    keys are made by their owners on the chat page, never here."""

    record_deletable = False  # revoked, not deleted: the row says when and which key it was
    list_display = ("prefix_shown", "name", "user", "created_at", "last_used_at", "expires_at", "revoked_at")
    list_filter = (("revoked_at", admin.EmptyFieldListFilter),)
    search_fields = ("user__username", "prefix", "name")
    list_select_related = ("user",)
    fields = ("id", "user", "name", "prefix_shown", "created_at", "last_used_at", "expires_at", "revoked_at")
    readonly_fields = fields
    actions = ["revoke"]

    @admin.display(description="密钥前缀", ordering="prefix")
    def prefix_shown(self, obj: ApiKey) -> str:
        return f"{obj.prefix}…"

    @admin.action(description="吊销所选 API 密钥（立即生效）", permissions=["revoke"])
    def revoke(self, request, queryset) -> None:
        count = api_keys_revoke_by_staff(queryset=queryset, request=request)
        self.message_user(request, f"已吊销 {count} 把 API 密钥。", messages.SUCCESS)

    def has_revoke_permission(self, request) -> bool:
        return request.user.has_perm("chat_app.change_apikey")


@admin.register(CampusIdentity)
class CampusIdentityAdmin(RecordAdminMixin, admin.ModelAdmin):
    """Which local user each campus subject (OIDC or CAS) logs in as, what the campus said about
    the person at the last login, and their groups: which the group mapping gave, which staff gave
    by hand. Made by campus logins only: editing the link would hand one person's campus login to
    another account."""

    list_display = ("sub", "source", "user", "identity_type", "college", "updated_at")
    list_filter = ("source", "identity_type")
    search_fields = ("sub", "user__username", "user__first_name", "college")
    list_select_related = ("user",)
    fields = ("source", "sub", "user", "identity_type", "college", "groups_shown", "roles", "attributes",
              "created_at", "updated_at")
    readonly_fields = fields

    @admin.display(description="群组")
    def groups_shown(self, obj: CampusIdentity) -> str:
        mapped = set(CampusGroupGrant.objects.filter(user=obj.user_id).values_list("group_id", flat=True))
        groups = [(group.name, "校园映射" if group.pk in mapped else "手工指定") for group in obj.user.groups.order_by("name")]
        return format_html_join("、", "{}（{}）", groups) or "—"


@admin.register(CampusGroupGrant)
class CampusGroupGrantAdmin(RecordAdminMixin, admin.ModelAdmin):
    """Who is in which group because of the group mapping (search a user to see theirs). Kept by
    logins only: deleting a mark would turn the membership into a hand-given one the mapping
    never takes back."""

    record_deletable = False
    list_display = ("user", "group", "granted_at")
    list_filter = ("group",)
    search_fields = ("user__username", "user__first_name", "group__name")
    list_select_related = ("user", "group")
    fields = list_display
    readonly_fields = fields


@admin.register(GroupMapping)
class GroupMappingAdmin(admin.ModelAdmin):
    """Groups from the campus: at every CAS or OIDC login, the person is put in the group of each
    rule whose attribute (claim) holds the value, and taken out of a group an earlier login's rules
    gave that no rule gives now. Groups given by hand are never touched."""

    list_display = ("source", "attribute", "value", "group")
    list_filter = ("source", "group")
    search_fields = ("attribute", "value", "group__name")
    list_select_related = ("group",)


class HasCommentFilter(admin.SimpleListFilter):
    title = "意见"
    parameter_name = "has_comment"

    def lookups(self, request, model_admin):
        return (("yes", "有意见"), ("no", "无意见"))

    def queryset(self, request, queryset):
        if self.value() == "yes":
            return queryset.exclude(comment="")
        if self.value() == "no":
            return queryset.filter(comment="")
        return queryset


@admin.register(Feedback)
class FeedbackAdmin(RecordAdminMixin, admin.ModelAdmin):
    """Students' ratings of answers: read them, filter them, open the conversation. They are the
    students' words: staff do not edit them."""

    list_display = ("rating", "comment_head", "answer_head", "agent_name", "user", "updated_at")
    list_filter = ("rating", HasCommentFilter, ("message__agent_name", admin.AllValuesFieldListFilter), "updated_at")
    search_fields = ("comment", "message__content", "user__username")
    date_hierarchy = "updated_at"
    list_select_related = ("user", "message")
    fields = ("rating", "comment", "user", "conversation_link", "answer", "links", "created_at", "updated_at")
    readonly_fields = fields

    @admin.display(description="操作")
    def links(self, obj: Feedback) -> str:
        return message_links(obj.message)

    @admin.display(description="意见")
    def comment_head(self, obj: Feedback) -> str:
        return obj.comment[:40]

    @admin.display(description="回答")
    def answer_head(self, obj: Feedback) -> str:
        return obj.message.content[:40]

    @admin.display(description="回答全文")
    def answer(self, obj: Feedback) -> str:
        return obj.message.content

    @admin.display(description="智能体", ordering="message__agent_name")
    def agent_name(self, obj: Feedback) -> str:
        return obj.message.agent_name

    @admin.display(description="对话")
    def conversation_link(self, obj: Feedback) -> str:
        url = reverse("admin:chat_app_conversation_change", args=[obj.message.conversation_id])
        return format_html('<a href="{}">{}</a>', url, obj.message.conversation)


# How a wait ended, in the words of its kind: "approved" is the person's yes, whatever they were asked.
WAIT_OUTCOMES = {
    Wait.Kind.APPROVAL: {Wait.Status.APPROVED: "已批准", Wait.Status.REJECTED: "已拒绝"},
    Wait.Kind.AUTHORIZATION: {Wait.Status.APPROVED: "已连接账号", Wait.Status.REJECTED: "未连接"},
    Wait.Kind.ELICITATION: {Wait.Status.APPROVED: "已回答", Wait.Status.REJECTED: "未回答"},
    Wait.Kind.QUESTION: {Wait.Status.APPROVED: "已回答", Wait.Status.REJECTED: "未回答"},
}


@admin.register(Wait)
class WaitAdmin(RecordAdminMixin, admin.ModelAdmin):
    """Every tool call that waited for a student (docs/design.md#waiting-for-a-person: their
    approval, the connection of their own account at a per-student MCP service, or their answer
    to what its MCP server or A2A sub-agent asked) and what became of it: a record for staff
    (which tools students decline, how often calls expire), never edited here. What a student
    typed into a form is theirs: staff see the question and how it was answered, not the answer's
    content."""

    record_deletable = False

    list_display = ("tool", "kind", "outcome", "user", "args_head", "created_at", "decided_at")
    list_filter = ("kind", "status", "tool", "created_at")
    search_fields = ("tool", "args", "run__user__username", "call_id")
    date_hierarchy = "created_at"
    list_select_related = ("run__user",)
    fields = ("tool", "kind", "service", "outcome", "args", "question_message", "answer_action", "call_id", "user",
              "conversation_link", "created_at", "expires_at", "decided_at")
    readonly_fields = fields

    @admin.display(description="结果", ordering="status")
    def outcome(self, obj: Wait) -> str:
        return WAIT_OUTCOMES.get(obj.kind, {}).get(obj.status) or obj.get_status_display()

    @admin.display(description="服务")
    def service(self, obj: Wait) -> str:
        return str((obj.ask or {}).get("service", ""))

    @admin.display(description="学生", ordering="run__user__username")
    def user(self, obj: Wait) -> str:
        return obj.run.user.get_username()

    @admin.display(description="提出的问题")
    def question_message(self, obj: Wait) -> str:
        return str((obj.ask or {}).get("message", ""))

    @admin.display(description="学生的回答")
    def answer_action(self, obj: Wait) -> str:
        action = (obj.answer or {}).get("action", "")
        return {"accept": "已提交", "decline": "拒绝回答", "cancel": "取消"}.get(action, action)

    @admin.display(description="参数")
    def args_head(self, obj: Wait) -> str:
        return obj.args[:60]

    @admin.display(description="对话")
    def conversation_link(self, obj: Wait) -> str:
        url = reverse("admin:chat_app_conversation_change", args=[obj.run.conversation_id])
        return format_html('<a href="{}">{}</a>', url, obj.run.conversation)


@admin.register(GroupLimits)
class GroupLimitsAdmin(admin.ModelAdmin):
    """A group's quota and rate (chat_app/runs/group_limits.py); a group without a row follows the
    global settings."""

    list_display = ("group", "daily_token_quota", "chat_rate_per_minute")
    search_fields = ("group__name",)
    autocomplete_fields = ("group",)
