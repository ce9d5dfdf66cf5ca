from django.apps import AppConfig


class KnowledgeAppConfig(AppConfig):
    name = "knowledge_app"
    verbose_name = "知识库"
