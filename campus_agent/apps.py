from django.apps import AppConfig
from django.conf import settings


class CampusAgentConfig(AppConfig):
    name = "campus_agent"
    verbose_name = "Campus Agent"

    def ready(self) -> None:
        from campus_agent.logging import logging_configure

        logging_configure(level=settings.LOG_LEVEL, log_dir=settings.LOG_DIR)
