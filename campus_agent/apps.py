from django.apps import AppConfig
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


class CampusAgentConfig(AppConfig):
    name = "campus_agent"
    verbose_name = "Campus Agent"

    def ready(self) -> None:
        from campus_agent.base.logging import logging_configure

        logging_configure(level=settings.LOG_LEVEL, log_dir=settings.LOG_DIR)
        if settings.TRACING_EXPORTERS:
            self._tracing_start()

    def _tracing_start(self) -> None:
        from loguru import logger

        from campus_agent.base.tracing import tracer, tracing_provider_build, tracing_start

        if tracer() is not None:  # ready() may run twice
            return
        try:
            provider = tracing_provider_build(settings.TRACING_EXPORTERS)
        except ValueError as exc:
            raise ImproperlyConfigured(f"tracing: {exc}") from exc
        tracing_start(provider)
        logger.info("tracing on, exporters={}", ",".join(settings.TRACING_EXPORTERS))
