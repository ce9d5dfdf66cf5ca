from django.apps import AppConfig


class InsightsAppConfig(AppConfig):
    """Staff insight: routing cases and their checks, usage per user, agent and day.

    It reads agents_app and chat_app; nothing imports it (chat_app tells it about stored turns
    with a signal, the catalog admins are extended from here)."""

    name = "insights_app"
    verbose_name = "运营洞察"

    def ready(self) -> None:
        from insights_app import receivers  # noqa: F401 - keeps the usage rollup from chat_app's signal
