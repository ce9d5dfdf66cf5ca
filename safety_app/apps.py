from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _word_list_triggers_install(sender, using, **kwargs) -> None:
    from safety_app.lists_cache import word_list_triggers_install

    word_list_triggers_install(using=using)


class SafetyAppConfig(AppConfig):
    name = "safety_app"
    verbose_name = "内容安全"

    def ready(self) -> None:
        # After every migrate, so a table a migration rebuilt gets its triggers back (SQLite drops them).
        post_migrate.connect(_word_list_triggers_install, sender=self, dispatch_uid="word_list_triggers_install")
