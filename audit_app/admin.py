"""The audit log in admin: read-only for everyone, a superuser included (no add, change or delete
page, no bulk delete), filtered by actor, event, date and outcome; exported as CSV or JSON lines
by whoever holds the export permission (the 审计员 role), each export itself an audit row."""

from django.contrib import admin
from django.core.paginator import Paginator
from django.db.models import Max, Min, Q
from django.http import StreamingHttpResponse
from django.utils import timezone

from audit_app.export import CONTENT_TYPES, audit_export
from audit_app.models import AuditEvent
from campus_agent.base.admin_records import RecordAdminMixin

ACTORS_LISTED = 30  # the actor filter offers the most recent ones; the search box finds any


class ActorFilter(admin.SimpleListFilter):
    title = "操作者"
    parameter_name = "actor_username"

    def lookups(self, request, model_admin):
        recent = (
            AuditEvent.objects.exclude(actor_username="")
            .order_by("-id")
            .values_list("actor_username", flat=True)[:1000]
        )
        names = list(dict.fromkeys(recent))[:ACTORS_LISTED]
        return [(name, name) for name in names]

    def queryset(self, request, queryset):
        return queryset.filter(actor_username=self.value()) if self.value() else queryset


COUNT_CAP = 10_000  # a filtered list counts this far (narrow the filters to page further)


class AuditPaginator(Paginator):
    """No COUNT(*) over millions of rows at every page: the unfiltered list's count comes from
    the ids (consecutive: the chain's), two index reads; a filtered one counts up to COUNT_CAP."""

    @property
    def count(self) -> int:
        if self.object_list.query.where:
            return self.object_list.order_by()[: COUNT_CAP + 1].count()
        ends = self.object_list.aggregate(first=Min("id"), last=Max("id"))
        return ends["last"] - ends["first"] + 1 if ends["last"] is not None else 0


@admin.register(AuditEvent)
class AuditEventAdmin(RecordAdminMixin, admin.ModelAdmin):
    record_deletable = False
    list_display = ("id", "time", "actor_username", "event", "target", "outcome", "source", "request_id")
    # 时间: today, 7 days, this month, this year; any range by address (?time__gte=…&time__lt=…).
    # No date_hierarchy: its year links are a DISTINCT over the whole table, seconds at 10 M rows.
    list_filter = (ActorFilter, "event", "outcome", ("time", admin.DateFieldListFilter))
    search_fields = ("actor_username", "request_id")  # exact, through their indexes: get_search_results
    ordering = ("-time",)  # the (time) and (actor…, time) indexes serve it, filtered or not
    paginator = AuditPaginator
    show_full_result_count = False  # no COUNT(*) over millions of rows on every page
    fields = (
        "id",
        "time",
        "actor",
        "actor_username",
        "source",
        "event",
        "target",
        "outcome",
        "request_id",
        "details",
        "prev_hash",
        "hash",
    )
    readonly_fields = fields
    actions = ["export_csv", "export_jsonl"]

    def get_search_results(self, request, queryset, search_term):
        """An account or a request id, exactly: Django's `=` is iexact (UPPER(), no index) and a
        substring search reads the whole table."""
        term = search_term.strip()
        if not term:
            return queryset, False
        return queryset.filter(Q(actor_username=term) | Q(request_id=term)), False

    def has_export_permission(self, request) -> bool:
        return request.user.has_perm("audit_app.export_auditevent")

    def _export(self, request, queryset, fmt: str):
        filters = {key: value for key, value in request.GET.items()}
        lines = audit_export(queryset=queryset, fmt=fmt, filters=filters, request=request)
        response = StreamingHttpResponse(lines, content_type=CONTENT_TYPES[fmt])
        name = f"audit-{timezone.now():%Y%m%d-%H%M%S}.{fmt}"
        response["Content-Disposition"] = f'attachment; filename="{name}"'
        return response

    @admin.action(description="导出所选（CSV）", permissions=["export"])
    def export_csv(self, request, queryset):
        return self._export(request, queryset, "csv")

    @admin.action(description="导出所选（JSON Lines）", permissions=["export"])
    def export_jsonl(self, request, queryset):
        return self._export(request, queryset, "jsonl")
