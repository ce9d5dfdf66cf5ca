from django.apps import AppConfig


class ChatAppConfig(AppConfig):
    name = "chat_app"
    verbose_name = "对话"

    def ready(self) -> None:
        from chat_app.accounts import session_cache  # noqa: F401  (forgets revoked sessions at once)
        from chat_app.gateways.api import schema  # noqa: F401  (the OpenAPI auth extensions; its hook is in SPECTACULAR_SETTINGS)
        from chat_app.runs.wait import metrics_register

        metrics_register()
