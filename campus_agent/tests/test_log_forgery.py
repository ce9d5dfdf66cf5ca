"""Issue 20 point 2: nobody can write a line into the log but the code that logs it.

Real requests to the live server (uvicorn in a thread, the project's own sinks), then the real log
file (LOG_DIR/campus_agent.log, the rotating sink `logging_configure` installed) is read back:
each forgery shape must stay on the request's own line, shown escaped.
"""
import logging
import uuid

import httpx
import pytest
from django.conf import settings
from loguru import logger

from campus_agent.base.logging import log_text_flatten
from campus_agent.base.request_id import request_id_set

FAKE = "2099-01-01 00:00:00.000 | CRITICAL | request_id=forged | x:y:1 - FORGED"

# (name, what goes into the URL path after /healthz, what the logged line must show)
FORGERIES = [
    ("lf", "%0a", "\\n"),
    ("crlf", "%0d%0a", "\\r\\n"),
    ("cr", "%0d", "\\r"),
    ("nul", "%00", "\\x00"),
    ("ansi", "%1b[2K%1b[1A", "\\x1b[2K\\x1b[1A"),
    ("nel-c1", "%c2%85", "\\x85"),
    ("line-separator", "%e2%80%a8", "\\u2028"),
    ("paragraph-separator", "%e2%80%a9", "\\u2029"),
    ("bidi-override", "%e2%80%ae", "\\u202e"),
    ("bidi-isolate", "%e2%81%a6", "\\u2066"),
    ("vertical-tab-formfeed", "%0b%0c", "\\x0b\\x0c"),
    ("del", "%7f", "\\x7f"),
    ("tab", "%09", "\\t"),
]


def _log_file():
    return settings.LOG_DIR / "campus_agent.log"


def _written_since(offset: int) -> str:
    with _log_file().open("rb") as log:
        log.seek(offset)
        return log.read().decode("utf-8", errors="replace")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("name", "encoded", "shown"), FORGERIES, ids=[f[0] for f in FORGERIES])
def test_a_request_path_cannot_forge_a_log_line(live_asgi, name, encoded, shown):
    assert _log_file().exists(), "the suite's process logs to LOG_DIR like a deployment"
    rid = uuid.uuid4().hex
    offset = _log_file().stat().st_size  # the lines this request writes, not an earlier run's
    fake = FAKE.replace("FORGED", f"FORGED-{rid}")
    # No login: the request-id middleware logs the decoded path of anything that arrives.
    response = httpx.get(f"{live_asgi}/healthz{encoded}{fake.replace(' ', '%20')}", headers={"X-Request-Id": rid})
    assert response.status_code < 500
    text = _written_since(offset)
    assert [line for line in text.splitlines() if line.startswith("2099-01-01")] == []
    # The path shows on → and ←, and on django.request's "Not Found": each time inside the
    # request's own line, escaped, never at the start of a line of its own.
    carrying = [line for line in text.splitlines() if f"FORGED-{rid}" in line]
    assert len(carrying) >= 2, carrying
    assert carrying == [line for line in text.splitlines() if f"request_id={rid}" in line]
    assert all(f"/healthz{shown}2099-01-01" in line for line in carrying), carrying


def test_extra_fields_messages_and_stdlib_records_are_flattened(tmp_path):
    """Whoever logs — a bound extra field, a stdlib logger bridged in (django, uvicorn) — the
    text reaches every sink flattened: the patcher is the process's, not a call site's."""
    from campus_agent.base.logging import LOG_FORMAT

    path = tmp_path / "x.log"
    sink = logger.add(path, format=LOG_FORMAT + " | {extra[who]}", level="INFO", encoding="utf-8",
                      filter=lambda record: "who" in record["extra"])
    plain = logger.add(path, format=LOG_FORMAT, level="INFO", encoding="utf-8",
                       filter=lambda record: "who" not in record["extra"])
    try:
        request_id_set("abcdef0123456789")
        logger.bind(who="evil\nline").info("model said {}", "a\r\nb\x1b[31m")
        logging.getLogger("django.request").warning("Not Found: %s", "/x\n" + FAKE)
        logging.getLogger("uvicorn.error").warning("Invalid HTTP request: %s", "\x00\u202e")
    finally:
        logger.remove(sink)
        logger.remove(plain)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 3, lines
    assert lines[0].endswith("model said a\\r\\nb\\x1b[31m | evil\\nline")
    assert f"Not Found: /x\\n{FAKE}" in lines[1]
    assert "Invalid HTTP request: \\x00\\u202e" in lines[2]


def test_an_exception_message_cannot_forge_a_line_after_its_traceback(tmp_path):
    path = tmp_path / "x.log"
    sink = logger.add(path, format="{message}", level="INFO", encoding="utf-8", backtrace=False, diagnose=False)
    try:
        try:
            try:
                raise KeyError("inner\n" + FAKE)
            except KeyError as inner:
                raise ValueError("tool id call_1\n" + FAKE) from inner
        except ValueError:
            logger.exception("tool failed")
            logging.getLogger("django").exception("bridged")
    finally:
        logger.remove(sink)
    text = path.read_text(encoding="utf-8")
    assert not any(line.startswith("2099-01-01") for line in text.splitlines()), text
    assert "ValueError: tool id call_1\\n2099-01-01" in text  # same name, flattened message
    assert "KeyError: 'inner\\n2099-01-01" in text  # the cause too


def test_flatten_keeps_ordinary_text_as_is():
    text = "→ GET /api/v1/conversations 食堂 😀 café"
    assert log_text_flatten(text) is text
    assert log_text_flatten("a\ud800b") == "a\\ud800b"  # a lone surrogate: a UTF-8 sink cannot write it
