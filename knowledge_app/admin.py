"""The knowledge base in admin (docs/knowledge.md): collections, and their documents added several
at a time, each with its status and progress."""

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.db import transaction
from django.db.models import Count
from django.http import Http404, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from campus_agent.base.admin_history import CatalogHistoryAdmin
from knowledge_app.indexing import indexing_start
from knowledge_app.ingest import MSG_TOO_LARGE, DocumentRefused, document_add
from knowledge_app.models import KnowledgeCollection, KnowledgeDocument
from knowledge_app.search import collection_search

SEARCH_SHOWN = 20  # passages the try-out page lists
SEARCH_QUERY_MAX = 500
FILES_MAX = 50  # one upload: a folder of a handbook's chapters, not an archive's worth
MSG_TOO_MANY = f"一次最多上传 {FILES_MAX} 个文件。"
MSG_ADDED = "《{title}》已加入“{collection}”，正在后台索引，完成后可检索（状态见下表）。"
MSG_ALREADY = "{name}：内容与已有的《{title}》相同，没有重复加入。"
MSG_REFUSED = "{name}：{reason}"


class MultipleFileInput(forms.ClearableFileInput):
    allow_multiple_selected = True


class MultipleFileField(forms.FileField):
    """Several files in one field (Django's documented way)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("widget", MultipleFileInput())
        super().__init__(*args, **kwargs)

    def clean(self, data, initial=None):
        files = data if isinstance(data, list | tuple) else [data]
        if len(files) > FILES_MAX:
            raise forms.ValidationError(MSG_TOO_MANY)
        return [super(MultipleFileField, self).clean(item, initial) for item in files]


class UploadForm(forms.Form):
    collection = forms.ModelChoiceField(KnowledgeCollection.objects.all(), label="知识库")
    files = MultipleFileField(label="文件", help_text=f"可多选，一次最多 {FILES_MAX} 个。")


@admin.register(KnowledgeCollection)
class KnowledgeCollectionAdmin(CatalogHistoryAdmin):
    list_display = ("slug", "name", "enabled", "document_count", "search_link", "updated_at")
    list_filter = ("enabled",)
    search_fields = ("slug", "name", "description")
    filter_horizontal = ("allowed_groups",)

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(_documents=Count("documents"))

    @admin.display(description="文件数", ordering="_documents")
    def document_count(self, obj: KnowledgeCollection) -> int:
        return obj._documents

    @admin.display(description="试检索")
    def search_link(self, obj: KnowledgeCollection) -> str:
        return format_html('<a href="{}">试检索</a>', reverse("admin:knowledge_app_search", args=[obj.pk]))

    def get_urls(self):
        return [path("<int:collection_id>/search/", self.admin_site.admin_view(self.search_view),
                     name="knowledge_app_search"), *super().get_urls()]

    def search_view(self, request, collection_id: int):
        """What the model would read for a question: the ranked passages, their scores, which index
        found them (docs/knowledge.md#measuring-search)."""
        collection = self.get_object(request, str(collection_id))
        if collection is None or not self.has_view_permission(request, collection):
            raise Http404
        query = request.GET.get("q", "").strip()[:SEARCH_QUERY_MAX]
        hits = collection_search(collection, query, limit=SEARCH_SHOWN) if query else []
        context = {**self.admin_site.each_context(request), "opts": self.model._meta, "collection": collection,
                   "query": query, "hits": hits, "title": "试检索"}
        return TemplateResponse(request, "admin/knowledge_app/search.html", context)


@admin.register(KnowledgeDocument)
class KnowledgeDocumentAdmin(admin.ModelAdmin):
    list_display = ("title", "collection", "status", "progress", "passage_count", "pages", "size", "updated_at")
    list_filter = ("status", "collection")
    search_fields = ("title", "file_name", "content_hash")
    list_select_related = ("collection",)
    fields = ("collection", "title", "file", "file_name", "content_type", "size", "content_hash", "pages", "status",
              "progress", "error", "passage_count", "indexed_at", "uploaded_by", "created_at", "updated_at")
    readonly_fields = ("collection", "file", "file_name", "content_type", "size", "content_hash", "pages", "status",
                       "progress", "error", "passage_count", "indexed_at", "uploaded_by", "created_at", "updated_at")

    def get_urls(self):
        return [path("upload/", self.admin_site.admin_view(self.upload_view), name="knowledge_app_upload"),
                *super().get_urls()]

    def add_view(self, request, form_url="", extra_context=None):
        return HttpResponseRedirect(reverse("admin:knowledge_app_upload"))  # documents come as uploads

    def upload_view(self, request):
        if not self.has_add_permission(request):
            return HttpResponseRedirect(reverse("admin:index"))
        form = UploadForm(request.POST or None, request.FILES or None)
        if request.method == "POST" and form.is_valid():
            collection = form.cleaned_data["collection"]
            for uploaded in form.cleaned_data["files"]:
                self._added(request, collection, uploaded)
            transaction.on_commit(indexing_start)  # on a thread of this process (knowledge_app.indexing)
            return HttpResponseRedirect(reverse("admin:knowledge_app_knowledgedocument_changelist"))
        context = {**self.admin_site.each_context(request), "opts": self.model._meta, "form": form,
                   "title": "上传文件"}
        return TemplateResponse(request, "admin/knowledge_app/upload.html", context)

    def _added(self, request, collection: KnowledgeCollection, uploaded) -> None:
        if uploaded.size > settings.KNOWLEDGE_FILE_MAX_BYTES:  # not read: it is refused anyway
            messages.error(request, MSG_REFUSED.format(name=uploaded.name, reason=MSG_TOO_LARGE.format(
                limit=settings.KNOWLEDGE_FILE_MAX_BYTES // (1024 * 1024))))
            return
        try:
            result = document_add(collection=collection, name=uploaded.name, data=uploaded.read(),
                                  uploaded_by=request.user)
        except DocumentRefused as exc:
            messages.error(request, MSG_REFUSED.format(name=uploaded.name, reason=exc))
            return
        if result.created:
            self.log_addition(request, result.document, [{"added": {}}])
            messages.success(request, MSG_ADDED.format(title=result.document.title, collection=collection.name))
        else:
            messages.warning(request, MSG_ALREADY.format(name=uploaded.name, title=result.document.title))
