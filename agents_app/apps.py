from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _catalog_triggers_install(sender, using, **kwargs) -> None:
    from agents_app.catalog_cache import catalog_triggers_install

    catalog_triggers_install(using=using)


class AgentsAppConfig(AppConfig):
    name = "agents_app"
    verbose_name = "智能体与 MCP 服务"

    def ready(self) -> None:
        from agents_app import signals  # noqa: F401 - connects the cache invalidation receivers
        from agents_app.metrics import metrics_register

        metrics_register()
        # After every migrate, so a table a migration rebuilt gets its triggers back.
        post_migrate.connect(_catalog_triggers_install, sender=self, dispatch_uid="catalog_triggers_install")
