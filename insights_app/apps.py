from django.apps import AppConfig


class InsightsAppConfig(AppConfig):
    """Staff insight: routing cases and their checks, usage per user, agent and day.

    It reads agents_app and chat_app; nothing imports it: chat_app tells it about stored turns
    with a signal, and it adds its routing checks and links to their admin pages as admin
    extensions registered here (campus_agent/base/admin_extensions.py)."""

    name = "insights_app"
    verbose_name = "运营洞察"

    def ready(self) -> None:
        from insights_app import receivers  # noqa: F401 - keeps the usage rollup from chat_app's signal
        from insights_app.admin_extensions import admin_extensions_register

        admin_extensions_register()
