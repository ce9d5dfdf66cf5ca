from django.apps import AppConfig


class KnowledgeAppConfig(AppConfig):
    name = "knowledge_app"
    verbose_name = "知识库"

    def ready(self) -> None:
        # PassageVector lives with the code that reads and writes its column (knowledge_app/vectors.py):
        # importing it registers the model.
        from knowledge_app import vectors  # noqa: F401
