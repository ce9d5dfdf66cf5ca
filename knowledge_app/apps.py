from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _knowledge_triggers_install(sender, using, **kwargs) -> None:
    from knowledge_app.index_stamp import knowledge_triggers_install

    knowledge_triggers_install(using=using)


class KnowledgeAppConfig(AppConfig):
    name = "knowledge_app"
    verbose_name = "知识库"

    def ready(self) -> None:
        # Two models live beside the code that reads and writes them: PassageVector
        # (knowledge_app/vectors.py, its column is the engine's own) and the index's stamp
        # (knowledge_app/index_stamp.py); importing them here registers them, as models.py's are.
        # Nothing here loads the Chinese dictionary: that happens at a worker's first search
        # (knowledge_app.keyword_index).
        from knowledge_app import index_stamp, vectors  # noqa: F401

        # After every migrate, so a table a migration rebuilt gets its triggers back (SQLite drops them).
        post_migrate.connect(_knowledge_triggers_install, sender=self, dispatch_uid="knowledge_triggers_install")
