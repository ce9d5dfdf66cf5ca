from django.apps import AppConfig


class ChatAppConfig(AppConfig):
    name = "chat_app"
    verbose_name = "对话"

    def ready(self) -> None:
        from chat_app import (
            auth_cache,  # noqa: F401  (forgets revoked sessions at once)
            schema,  # noqa: F401  (registers the OpenAPI auth extensions; its hook is in SPECTACULAR_SETTINGS)
        )
        from chat_app.metrics import metrics_register

        metrics_register()
