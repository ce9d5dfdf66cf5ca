"""Admin pages of records: rows staff read (and filter, search, open) but never add or edit."""


class RecordAdminMixin:
    """No add, no change; delete as Django decides, unless `record_deletable = False`.
    For ModelAdmin and inlines alike (an inline's add check also gets the parent object)."""

    record_deletable = True

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return self.record_deletable and super().has_delete_permission(request, obj)
