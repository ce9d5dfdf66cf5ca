"""Loguru for everything: stdout and a rotating file, every line carrying the request id.

Stdlib loggers (django, daphne, httpx, mcp, openai, …) are bridged in with an intercept
handler, so one format and one set of sinks serve the whole process.
"""
import inspect
import logging
import sys
from pathlib import Path

from loguru import logger

from campus_agent.request_id import request_id_get

LOG_FORMAT = (
    "{time:YYYY-MM-DD HH:mm:ss.SSS} | {level: <8} | request_id={extra[request_id]} | "
    "{name}:{function}:{line} - {message}"
)
BRIDGED_LOGGERS = (
    "django", "django.server", "daphne", "httpx", "httpcore", "httpx2", "httpcore2", "mcp", "openai", "uvicorn",
)
_configured = False


class InterceptHandler(logging.Handler):
    """Routes a stdlib record to loguru, keeping its level and caller (loguru's README recipe)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            level: str | int = logger.level(record.levelname).name
        except ValueError:
            level = record.levelno
        frame, depth = inspect.currentframe(), 0
        while frame and (depth == 0 or frame.f_code.co_filename == logging.__file__):
            frame = frame.f_back
            depth += 1
        logger.opt(depth=depth, exception=record.exc_info).log(level, record.getMessage())


def _add_request_id(record) -> None:
    record["extra"].setdefault("request_id", request_id_get())


def logging_configure(*, level: str = "INFO", log_dir: Path | None = None) -> None:
    """Installs the sinks once per process (idempotent: Django may call ready() twice)."""
    global _configured
    if _configured:
        return
    _configured = True
    logger.remove()
    logger.configure(patcher=_add_request_id)
    logger.add(sys.stdout, level=level, format=LOG_FORMAT, enqueue=False, backtrace=False, diagnose=False)
    if log_dir is not None:
        Path(log_dir).mkdir(parents=True, exist_ok=True)
        logger.add(
            Path(log_dir) / "campus_agent.log",
            level=level,
            format=LOG_FORMAT,
            rotation="50 MB",
            retention="14 days",
            encoding="utf-8",
            backtrace=False,
            diagnose=False,  # diagnose would print local variables: tokens among them
        )
    # The root level gates stdlib records before they are built: at level 0 every DEBUG record of
    # openai/httpcore would be formatted per model chunk and only then dropped by loguru.
    logging.basicConfig(handlers=[InterceptHandler()], level=logging.getLevelName(level.upper()), force=True)
    for name in BRIDGED_LOGGERS:
        std = logging.getLogger(name)
        std.handlers = [InterceptHandler()]
        std.propagate = False
    # httpx logs every request line at INFO with full URLs; keep it at WARNING.
    for noisy in ("httpx", "httpcore", "httpx2", "httpcore2"):  # httpx2: the openai SDK's client
        logging.getLogger(noisy).setLevel(logging.WARNING)
