from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _knowledge_triggers_install(sender, using, **kwargs) -> None:
    from knowledge_app.index_stamp import knowledge_triggers_install

    knowledge_triggers_install(using=using)


class KnowledgeAppConfig(AppConfig):
    name = "knowledge_app"
    verbose_name = "知识库"

    def ready(self) -> None:
        # PassageVector lives with the code that reads and writes its column (knowledge_app/vectors.py):
        # importing it registers the model.
        from knowledge_app import vectors  # noqa: F401
        # The stamp's model lives beside the code that reads it (knowledge_app/index_stamp.py);
        # importing it here registers it, as models.py's are. Nothing here loads the Chinese
        # dictionary: that happens at a worker's first search (knowledge_app.keyword_index).
        from knowledge_app import index_stamp  # noqa: F401

        # After every migrate, so a table a migration rebuilt gets its triggers back (SQLite drops them).
        post_migrate.connect(_knowledge_triggers_install, sender=self, dispatch_uid="knowledge_triggers_install")
