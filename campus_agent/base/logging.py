"""Loguru for everything: stdout and a rotating file, every line carrying the request id.

Stdlib loggers (django, daphne, httpx, mcp, openai, …) are bridged in with an intercept
handler, so one format and one set of sinks serve the whole process.

One patcher sees every record before any sink, whoever logged it (our code, a bridged stdlib
logger, a library): it adds the request id and makes the record's text single-line and free of
control characters (`log_text_flatten`) with personal numbers masked (mobile and resident ID
numbers: campus_agent.base.redaction), so no call site can forget and no value from outside —
a request path, a model's error text, a tool-call id — can forge a log line, move the cursor of
a terminal (ANSI escapes) or reorder what a reader sees (bidi overrides). A traceback stays
multi-line, as it always was; its exception messages are flattened like the rest.
"""
import inspect
import logging
import re
import sys
from pathlib import Path

from loguru import logger

from campus_agent.base.redaction import personal_numbers_mask
from campus_agent.base.request_id import is_turn_request, request_id_get

LOG_FORMAT = (
    "{time:YYYY-MM-DD HH:mm:ss.SSS} | {level: <8} | request_id={extra[request_id]} | "
    "{name}:{function}:{line} - {message}"
)
BRIDGED_LOGGERS = (
    "django", "django.server", "daphne", "httpx", "httpcore", "httpx2", "httpcore2", "mcp", "openai", "uvicorn",
)
# What a library logs as its own ERROR, with a traceback, for each malformed request a client
# sends (a2a-sdk's JSON-RPC dispatcher: params of the wrong type, a base request it cannot read).
# The client is answered with its JSON-RPC error; the mistake is the client's, not ours, and a
# traceback per request would bury ours: one INFO line naming the reason instead.
CLIENT_MISTAKES = {
    "a2a.server.routes.jsonrpc_dispatcher": frozenset({
        "Failed to validate base JSON-RPC request", "Failed to parse request params",
    }),
}
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


# C0 controls (CR, LF, NUL, TAB, ESC …), DEL and C1 (NEL U+0085 among them), the Unicode line and
# paragraph separators, the bidi marks, embeddings, overrides and isolates (U+202E shows text
# reversed), and lone surrogates (which a UTF-8 file sink cannot even encode).
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_PLAIN = (int, float, bool, type(None))


class ClientMistakeFilter(logging.Filter):
    """Turns a library's ERROR-with-traceback about a client's malformed request (CLIENT_MISTAKES)
    into one INFO line with the exception's reason."""

    def __init__(self, messages: frozenset[str]):
        super().__init__()
        self.messages = messages

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.msg in self.messages:
            reason = record.exc_info[1]
            record.msg, record.args = "%s (client request): %s", (record.msg, f"{type(reason).__name__}: {reason}")
            record.levelno, record.levelname = logging.INFO, "INFO"
            record.exc_info, record.exc_text = None, None
        return True


class TurnAccessFilter(logging.Filter):
    """Leaves out uvicorn's access line of a request that started a turn (a POST of TURN_PATH
    answered below 400) unless the level is DEBUG: the turn writes its own line
    (chat_app.runs.turn_log). uvicorn writes its access lines with its own handler, beside loguru;
    the others are kept as they were."""

    def __init__(self, *, keep_turns: bool):
        super().__init__()
        self.keep_turns = keep_turns

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if self.keep_turns or not isinstance(args, tuple) or len(args) != 5:
            return True
        _client, method, path, _version, status = args  # uvicorn's '%s - "%s %s HTTP/%s" %d'
        return not (isinstance(status, int) and status < 400 and isinstance(path, str)
                    and is_turn_request(method, path.partition("?")[0]))


def _escape(match: re.Match) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def log_text_flatten(text: str) -> str:
    """`text` on one line, every control character shown escaped (`\\n`, `\\x1b`, `\\u202e`),
    mobile and resident ID numbers masked."""
    return personal_numbers_mask(_UNSAFE.sub(_escape, text) if _UNSAFE.search(text) else text)


def _needs_cleaning(text: str) -> bool:
    return bool(_UNSAFE.search(text)) or personal_numbers_mask(text) is not text


def _exception_flatten(exc: BaseException | None, depth: int = 0):
    """`exc`, or a stand-in of the same name whose message (and notes, cause, context) is flattened
    when any of them holds a control character: loguru writes the exception's text after the line."""
    if exc is None or depth > 8:
        return exc
    try:
        text = str(exc)
        notes = [str(note) for note in getattr(exc, "__notes__", ())]
    except Exception:
        return exc
    cause = _exception_flatten(exc.__cause__, depth + 1)
    context = _exception_flatten(exc.__context__, depth + 1)
    unsafe = _needs_cleaning(text) or any(_needs_cleaning(note) for note in notes)
    if not unsafe and cause is exc.__cause__ and context is exc.__context__:
        return exc
    kind = type(exc)
    stand_in_type = type(kind.__name__, (Exception,), {"__module__": kind.__module__, "__qualname__": kind.__qualname__})
    stand_in = stand_in_type(log_text_flatten(text))
    if notes:
        stand_in.__notes__ = [log_text_flatten(note) for note in notes]
    stand_in.__cause__, stand_in.__context__ = cause, context
    stand_in.__suppress_context__ = exc.__suppress_context__
    return stand_in.with_traceback(exc.__traceback__)


def _record_patch(record) -> None:
    """The one patcher (see the module docstring): the request id, then every value flattened."""
    extra = record["extra"]
    extra.setdefault("request_id", request_id_get())
    record["message"] = log_text_flatten(record["message"])
    for key, value in extra.items():
        if isinstance(value, str):
            extra[key] = log_text_flatten(value)
        elif not isinstance(value, _PLAIN):
            shown = str(value)
            if _needs_cleaning(shown):
                extra[key] = log_text_flatten(shown)
    exception = record["exception"]
    if exception is not None and exception.value is not None:
        flat = _exception_flatten(exception.value)
        if flat is not exception.value:
            record["exception"] = type(exception)(type(flat), flat, exception.traceback)


def logging_configure(*, level: str = "INFO", log_dir: Path | None = None) -> None:
    """Installs the sinks once per process (idempotent: Django may call ready() twice)."""
    global _configured
    if _configured:
        return
    _configured = True
    logger.remove()
    logger.configure(patcher=_record_patch)
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
    # The MCP server (chat_app/gateways/mcp_server.py) runs the SDK's session manager once per request: its
    # "started", "terminating session: None", "shutting down" lines would be three per request.
    for noisy in ("mcp.server.streamable_http_manager", "mcp.server.streamable_http"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    for name, messages in CLIENT_MISTAKES.items():
        logging.getLogger(name).addFilter(ClientMistakeFilter(messages))
    turn_access_filter_install(level)


def turn_access_filter_install(level: str) -> None:
    """uvicorn's access logger (configured by uvicorn before it imports the application) leaves
    out a turn's line below DEBUG (TurnAccessFilter); installed once."""
    access = logging.getLogger("uvicorn.access")
    access.filters = [kept for kept in access.filters if not isinstance(kept, TurnAccessFilter)]
    access.addFilter(TurnAccessFilter(keep_turns=logger.level(level.upper()).no <= logging.DEBUG))
