"""The catalog's history in admin: the list of versions (who, when, which fields), a version's
diff against the live row, and one-click rollback (campus_agent.base.history).

django-simple-history's own per-version page is a form that saves whatever it posts; here that
URL shows the diff instead, and a rollback is only the POST of `<id>/history/<version>/rollback/`
(change permission, CSRF; a GET goes to the diff). `history_rollback_confirm` lets a subclass put
a confirm page first (insights_app does for agents: their routing cases against the rolled-back
version).

A save that changes nothing (the form and its inlines as they were) is not a version: the list
shows only saves that changed something.
"""
from django.contrib import messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from simple_history.admin import SimpleHistoryAdmin
from simple_history.utils import get_history_model_for_model

from campus_agent.base.admin_text import LineEndingsAdmin
from campus_agent.base.history import history_date_text, history_diff, history_fields, history_rollback

DIFF_TITLE = "{obj}：{date} 的版本与当前的差异"
NO_DIFF_TEXT = "该版本与当前完全相同，无需回滚。"
ROLLED_BACK_TEXT = "“{obj}”已回滚到 {date} 的版本，下一轮对话即生效。"
ROLLBACK_MISSING_TEXT = "该版本关联的以下对象已删除，未恢复：{missing}"
ROLLBACK_FAILED_TEXT = "无法回滚：{error}"


class CatalogHistoryAdmin(LineEndingsAdmin, SimpleHistoryAdmin):
    """SimpleHistoryAdmin with the diff page in place of its revert form, and the rollback view.

    `history_masked` names JSON fields' sub-keys whose values the diff never shows."""

    object_history_list_template = "admin/history/object_history_list.html"
    history_masked: dict[str, tuple[str, ...]] = {}

    def get_urls(self):
        opts = self.opts
        own = [
            path("<path:object_id>/history/<int:version_id>/rollback/",
                 self.admin_site.admin_view(self.history_rollback_view),
                 name=f"{opts.app_label}_{opts.model_name}_history_rollback"),
        ]
        return own + super().get_urls()  # before the change view's catch-all

    def save_model(self, request, obj, form, change):
        if change and not form.has_changed():
            # Nothing the form holds changed (its many-to-many links included, and they are not
            # set again): no version. Inlines are not in the history.
            obj.skip_history_when_saving = True
            try:
                return super().save_model(request, obj, form, change)
            finally:
                del obj.skip_history_when_saving
        return super().save_model(request, obj, form, change)

    # --- the list: field names only (a value may be a credential, and the diff page masks it)

    def set_history_delta_changes(self, request, historical_records, foreign_keys_are_objs=True):
        labels = {f.name: str(f.verbose_name) for f in history_fields(self.model)}
        records = list(historical_records)
        for newer, older in zip(records, records[1:], strict=False):
            delta = newer.diff_against(older, included_fields=list(labels))
            newer.history_changed_labels = [labels[name] for name in delta.changed_fields if name in labels]
        if records and historical_records.number == 1:
            # The newest version is the row as it is (unless it was changed without a save): it
            # offers no 与当前对比 / 回滚, there would be nothing to compare or put back.
            newest = records[0]
            live = self.model._default_manager.filter(pk=getattr(newest, self.opts.pk.attname)).first()
            newest.history_is_current = live is not None and not history_diff(record=newest, obj=live)

    # --- one version

    def _history_record(self, obj, version_id):
        if not str(version_id).isdigit():  # simple_history's URL takes any text there
            raise Http404
        return get_object_or_404(get_history_model_for_model(self.model), id=obj.pk, history_id=version_id)

    def history_locked_fields(self, request, obj) -> set[str]:
        """Fields this staff member cannot change (read-only on the change form): kept by a rollback."""
        return set(self.get_readonly_fields(request, obj))

    def history_rollback_fields(self, request, obj) -> list[str]:
        locked = self.history_locked_fields(request, obj)
        return [f.name for f in history_fields(self.model) if f.name not in locked]

    def _history_url(self, name: str, *args) -> str:
        return reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_{name}", args=args)

    def history_form_view(self, request, object_id, version_id, extra_context=None):
        """The version against the live row, field by field, and the rollback button."""
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            raise Http404
        if not self.has_view_or_change_permission(request, obj):
            raise PermissionDenied
        record = self._history_record(obj, version_id)
        diffs = history_diff(record=record, obj=obj, locked=self.history_locked_fields(request, obj),
                             masked=self.history_masked)
        context = {
            **self.admin_site.each_context(request),
            "title": DIFF_TITLE.format(obj=obj, date=history_date_text(record)),
            "opts": self.opts,
            "original": obj,
            "record": record,
            "diffs": diffs,
            "no_diff": NO_DIFF_TEXT,
            "change_url": self._history_url("change", obj.pk),
            "history_url": self._history_url("history", obj.pk),
            "rollback_url": self._history_url("history_rollback", obj.pk, record.history_id)
            if self.has_change_permission(request, obj) and any(not d.locked for d in diffs) else None,
            **(extra_context or {}),
        }
        return TemplateResponse(request, "admin/history/diff.html", context)

    def history_rollback_confirm(self, request, obj, record, fields):
        """A response to show before the rollback (a confirm page), or None to roll back now."""
        return None

    def history_rollback_view(self, request, object_id, version_id):
        if request.method != "POST":
            # Opened by address (a reload of the confirm page, a pasted link): the version's diff
            # with its rollback button, not a blank 405.
            return HttpResponseRedirect(self._history_url("simple_history", object_id, version_id))
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            raise Http404
        if not self.has_change_permission(request, obj):
            raise PermissionDenied
        record = self._history_record(obj, version_id)
        fields = self.history_rollback_fields(request, obj)
        response = self.history_rollback_confirm(request, obj, record, fields)
        if response is not None:
            return response
        try:
            restored = history_rollback(record=record, obj=obj, fields=fields, user=request.user)
        except ValidationError as exc:
            messages.error(request, ROLLBACK_FAILED_TEXT.format(error=" ".join(exc.messages)))
            return HttpResponseRedirect(self._history_url("simple_history", obj.pk, record.history_id))
        messages.success(request, ROLLED_BACK_TEXT.format(obj=restored.instance, date=history_date_text(record)))
        if restored.missing:
            messages.warning(request, ROLLBACK_MISSING_TEXT.format(missing="、".join(restored.missing)))
        return HttpResponseRedirect(self._history_url("change", obj.pk))
