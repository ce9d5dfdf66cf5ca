from django.apps import AppConfig


class AgentsAppConfig(AppConfig):
    name = "agents_app"
    verbose_name = "智能体与 MCP 服务"

    def ready(self) -> None:
        from agents_app import signals  # noqa: F401 - connects the cache invalidation receivers
        from agents_app.metrics import metrics_register

        metrics_register()
