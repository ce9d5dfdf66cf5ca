from django.contrib import admin
from django.db.models import Count

from safety_app.models import AnswerReport, ListWord, WordList
from safety_app.reports import report_handle


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
