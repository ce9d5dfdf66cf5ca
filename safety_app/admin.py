from asgiref.sync import async_to_sync
from django.contrib import admin, messages
from django.db.models import Count

from campus_agent.base.admin_secrets import SecretKeyAdminMixin, SecretKeyForm
from safety_app.model_check import model_config, model_probe
from safety_app.models import AnswerReport, ListWord, ModerationModel, WordList
from safety_app.reports import report_handle

# Where the checked texts (students' questions) go is a superuser right, as a model provider's
# address is: another staff member could send them, and the stored key, elsewhere.
MODERATION_SUPERUSER_ONLY_FIELDS = ("base_url",)
PROBE_TEXT = "你好"
PROBE_PASS_TEXT = "“{name}”可用：“{text}”判定为通过（{seconds:.2f} 秒）。"
PROBE_FLAGGED_TEXT = "“{name}”把“{text}”判定为违规（{category}），请检查模型和提示词。"
PROBE_FAILED_TEXT = "“{name}”检查失败：{reason}。这时学生的问题会被{then}。"


@admin.register(WordList)
class WordListAdmin(admin.ModelAdmin):
    # A list holds tens of thousands of words (moderation_import): they are shown and edited on the
    # 敏感词 page (filtered by list, searched), not inline here.
    list_display = (
        "name",
        "category",
        "action",
        "question",
        "answer",
        "reasoning",
        "enabled",
        "word_count",
        "updated_at",
    )
    list_filter = ("action", "category", "enabled")
    search_fields = ("name", "category")

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(word_total=Count("words"))

    @admin.display(description="词数", ordering="word_total")
    def word_count(self, obj) -> int:
        return obj.word_total


@admin.register(ListWord)
class ListWordAdmin(admin.ModelAdmin):
    list_display = ("word", "word_list")
    list_filter = ("word_list",)
    search_fields = ("word",)
    list_select_related = ("word_list",)
    autocomplete_fields = ("word_list",)


@admin.register(AnswerReport)
class AnswerReportAdmin(admin.ModelAdmin):
    """Students' reports of answers (docs/safety.md#reports-举报). What the student reported stays
    as they filed it; staff set the status and write the outcome, and whoever changes the status
    is recorded as its handler (safety_app.reports.report_handle, audited)."""

    list_display = ("created_at", "reason", "status", "answer_head", "agent_name", "reporter", "handled_by", "handled_at")
    list_filter = ("status", "reason", "created_at", "agent_name")
    search_fields = ("answer", "question", "detail", "outcome", "reporter__username", "message_id", "conversation_id")
    date_hierarchy = "created_at"
    list_select_related = ("reporter", "handled_by")
    fieldsets = (
        ("举报", {"fields": ("reason", "detail", "reporter", "created_at")}),
        ("被举报的问答", {"fields": ("question", "answer", "agent_name", "message_id", "conversation_id")}),
        ("处理", {"fields": ("status", "outcome", "handled_by", "handled_at")}),
    )
    readonly_fields = (
        "reason",
        "detail",
        "reporter",
        "created_at",
        "question",
        "answer",
        "agent_name",
        "message_id",
        "conversation_id",
        "handled_by",
        "handled_at",
    )

    @admin.display(description="回答")
    def answer_head(self, obj: AnswerReport) -> str:
        return obj.answer[:40]

    def has_add_permission(self, request) -> bool:
        return False  # a report is a student's, filed on the page or through the API

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # the record of a complaint and of how it was handled is kept

    def save_model(self, request, obj, form, change) -> None:
        report_handle(
            report=obj,
            status=form.cleaned_data["status"],
            outcome=form.cleaned_data["outcome"],
            staff=request.user,
            request=request,
        )


class ModerationModelForm(SecretKeyForm):
    """The key is write-only, as a model provider's (campus_agent.base.admin_secrets)."""

    key_help = "当前：{state}。留空则保留当前密钥；保存后不再显示。"
    key_new_help = "审核服务要求时填写；保存后不再显示。"

    class Meta:
        model = ModerationModel
        fields = ("name", "kind", "enabled", "base_url", "model", "api_key", "api_key_clear", "prompt", "question",
                  "answer", "reasoning", "timeout_sec", "fail_mode", "controversial_flagged")


@admin.register(ModerationModel)
class ModerationModelAdmin(SecretKeyAdminMixin, admin.ModelAdmin):
    """The moderation model (docs/safety.md#the-moderation-model): at most one enabled."""

    form = ModerationModelForm
    list_display = ("name", "kind", "model", "question", "answer", "reasoning", "fail_mode", "timeout_sec",
                    "api_key_status", "enabled", "updated_at")
    list_filter = ("kind", "enabled", "fail_mode")
    search_fields = ("name", "model", "base_url")
    actions = ("model_test",)
    readonly_fields = ("created_at", "updated_at")
    fieldsets = (
        (None, {"fields": ("name", "kind", "enabled")}),
        ("连接", {"fields": ("base_url", "model", "api_key", "api_key_clear", "timeout_sec", "fail_mode")}),
        ("检查什么", {"fields": ("question", "answer", "reasoning")}),
        ("安全对话模型", {"fields": ("prompt", "controversial_flagged")}),
        ("时间", {"fields": ("created_at", "updated_at"), "classes": ("collapse",)}),
    )

    superuser_only_fields = MODERATION_SUPERUSER_ONLY_FIELDS

    def has_add_permission(self, request) -> bool:
        return request.user.is_superuser and super().has_add_permission(request)  # a new one needs an address

    @admin.action(description=f"测试（发送“{PROBE_TEXT}”）", permissions=["change"])
    def model_test(self, request, queryset) -> None:
        """Asks each model about a harmless text, as a question would: its verdict, or why it failed."""
        for row in queryset.order_by("name"):
            probe = async_to_sync(model_probe)(model_config(row), text=PROBE_TEXT)
            verdict = probe.verdict
            if verdict.outcome == "pass":
                messages.success(request, PROBE_PASS_TEXT.format(name=row.name, text=PROBE_TEXT, seconds=probe.seconds))
            elif verdict.outcome == "flagged":
                messages.warning(request, PROBE_FLAGGED_TEXT.format(name=row.name, text=PROBE_TEXT,
                                                                     category=verdict.category))
            else:
                then = "拦截" if verdict.flagged else "放行"
                messages.error(request, PROBE_FAILED_TEXT.format(name=row.name, reason=probe.reason, then=then))
