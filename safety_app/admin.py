from django.contrib import admin
from django.db.models import Count

from safety_app.models import ListWord, WordList


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
