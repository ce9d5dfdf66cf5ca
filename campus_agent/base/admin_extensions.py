"""What one app adds to another app's admin pages, registered in its AppConfig.ready().

An app never unregisters, re-registers or subclasses another app's ModelAdmin (that breaks
silently with the order of INSTALLED_APPS or a Django upgrade). The page's owner mixes in
`ExtensibleAdmin`, which asks the extensions registered for its model, at request time: its URLs
when the admin's URLconf is first read, which is after every app's ready(); its actions, the
change form's buttons and the history pages' hooks per request. insights_app adds the routing
checks to the catalog's pages this way, and its "保存为路由用例" link to stored messages.

    class RoutingOnAgents(AdminExtension):
        def urls(self, model_admin): ...
    admin_extension_register(Agent, RoutingOnAgents())   # in InsightsAppConfig.ready()

Buttons come as data the page's template draws (templates/admin/includes/extension_*.html):
`tools` are POST buttons beside the page's own object tools ({"label", "url"}); `submit_rows`
submit the unsaved form elsewhere in a new tab ({"label", "url", "help", "name"}).
"""
from collections import defaultdict
from collections.abc import Callable

from django.contrib.admin.options import IS_POPUP_VAR
from django.db.models import Model

_registry: dict[type[Model], list["AdminExtension"]] = defaultdict(list)


class AdminExtension:
    """What an app adds to the admin of a model it does not own; each hook adds nothing unless
    overridden."""

    def urls(self, model_admin) -> list:
        """URL patterns put before the admin's own (its change view's pattern catches the rest)."""
        return []

    def actions(self, model_admin) -> list[Callable]:
        """Admin actions (functions `(model_admin, request, queryset)` made with @admin.action)."""
        return []

    def change_form_buttons(self, model_admin, request, obj) -> dict[str, list[dict]]:
        """`{"tools": [...], "submit_rows": [...]}` for the change form of `obj` (None: the add form)."""
        return {}

    def history_form_context(self, model_admin, request, object_id) -> dict:
        """Extra context of a version's page (CatalogHistoryAdmin's diff)."""
        return {}

    def history_rollback_confirm(self, model_admin, request, obj, record, fields):
        """A page to show before rolling `obj` back to `record` (its POST confirms), or None."""
        return None

    def links(self, obj) -> list[tuple[str, str]]:
        """(label, url) links shown on a stored row (a read-only inline's "操作" column)."""
        return []


def admin_extension_register(model: type[Model], extension: AdminExtension) -> None:
    """Adds `extension` to the admin pages of `model`; call it from AppConfig.ready()."""
    if extension not in _registry[model]:
        _registry[model].append(extension)


def admin_extensions(model: type[Model]) -> tuple[AdminExtension, ...]:
    return tuple(_registry.get(model, ()))


def admin_links(obj: Model) -> list[tuple[str, str]]:
    """Every extension's links on a stored row."""
    return [link for extension in admin_extensions(type(obj)) for link in extension.links(obj)]


class ExtensibleAdmin:
    """A ModelAdmin mixin, first among its bases: the extensions registered for its model add URLs,
    actions, change-form buttons and history hooks (over CatalogHistoryAdmin's). Its change form
    template includes templates/admin/includes/extension_tools.html and extension_submit_rows.html."""

    def get_urls(self):
        added = [pattern for extension in admin_extensions(self.model) for pattern in extension.urls(self)]
        return added + super().get_urls()

    def get_actions(self, request):
        actions = super().get_actions(request)
        if self.actions is None or IS_POPUP_VAR in request.GET:  # Django's rule: none at all then
            return actions
        for extension in admin_extensions(self.model):
            for function in extension.actions(self):
                wanted = getattr(function, "allowed_permissions", ())
                if all(getattr(self, f"has_{permission}_permission")(request) for permission in wanted):
                    actions[function.__name__] = self.get_action(function)
        return actions

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        tools, submit_rows = [], []
        for extension in admin_extensions(self.model):
            buttons = extension.change_form_buttons(self, request, obj if change else None)
            tools += buttons.get("tools", [])
            submit_rows += buttons.get("submit_rows", [])
        context.update(extension_tools=tools, extension_submit_rows=submit_rows)
        return super().render_change_form(request, context, add=add, change=change, form_url=form_url, obj=obj)

    def history_form_view(self, request, object_id, version_id, extra_context=None):
        added = {}
        for extension in admin_extensions(self.model):
            added.update(extension.history_form_context(self, request, object_id))
        return super().history_form_view(request, object_id, version_id, extra_context={**added, **(extra_context or {})})

    def history_rollback_confirm(self, request, obj, record, fields):
        for extension in admin_extensions(self.model):
            response = extension.history_rollback_confirm(self, request, obj, record, fields)
            if response is not None:
                return response
        return super().history_rollback_confirm(request, obj, record, fields)
