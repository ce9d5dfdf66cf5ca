import logging
import re
import threading

import pytest
from loguru import logger

from campus_agent.base.logging import BRIDGED_LOGGERS, LOG_FORMAT
from campus_agent.base.request_id import request_id_set


@pytest.fixture
def log_lines():
    """Every loguru line, as `request_id|level|name:function|message`, while the test runs."""
    lines: list[str] = []
    sink_id = logger.add(
        lambda message: lines.append(str(message).rstrip("\n")),
        level="DEBUG",
        format="{extra[request_id]}|{level}|{name}:{function}|{message}",
    )
    yield lines
    logger.remove(sink_id)


@pytest.mark.django_db
def test_request_lines_carry_the_request_id(client, log_lines):
    client.get("/healthz?ticket=should-not-be-logged", headers={"X-Request-Id": "0123456789abcdef"})

    mine = [line for line in log_lines if line.startswith("0123456789abcdef|")]
    assert any(line.endswith("|→ GET /healthz") for line in mine), log_lines
    assert any(re.search(r"\|← GET /healthz status=200 cost_ms=\d+\.\d$", line) for line in mine), log_lines
    assert not any("should-not-be-logged" in line for line in log_lines)  # no query strings


@pytest.mark.django_db
def test_generated_request_id_is_the_one_logged(client, log_lines):
    echoed = client.get("/healthz")["X-Request-Id"]
    assert [line.split("|")[0] for line in log_lines if "GET /healthz" in line] == [echoed, echoed]


def test_log_format_on_a_file_sink(tmp_path):
    path = tmp_path / "campus_agent.log"
    sink_id = logger.add(path, format=LOG_FORMAT, level="INFO", encoding="utf-8")
    try:
        request_id_set("abcdef0123456789")
        logger.info("食堂菜单已更新")
    finally:
        logger.remove(sink_id)

    (line,) = path.read_text(encoding="utf-8").splitlines()
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} \| INFO     \| request_id=abcdef0123456789 \| "
        r"campus_agent\.tests\.test_logging:test_log_format_on_a_file_sink:\d+ - 食堂菜单已更新",
        line,
    ), line


@pytest.mark.parametrize("name", BRIDGED_LOGGERS)
def test_stdlib_loggers_are_bridged_with_the_request_id(log_lines, name):
    request_id_set("1111222233334444")
    logging.getLogger(name).warning("upstream said %s", "no")

    # The caller is this test, not the logging module's internals.
    expected = "1111222233334444|WARNING|campus_agent.tests.test_logging:test_stdlib_loggers_are_bridged_with_the_request_id|upstream said no"
    assert expected in log_lines


def test_child_and_unlisted_stdlib_loggers_reach_loguru_too(log_lines):
    request_id_set("5555666677778888")
    logging.getLogger("django.request").error("bad request")
    logging.getLogger("some.library").warning("library warning")
    assert "5555666677778888|ERROR|campus_agent.tests.test_logging:test_child_and_unlisted_stdlib_loggers_reach_loguru_too|bad request" in log_lines
    assert any(line.endswith("|library warning") and line.startswith("5555666677778888|") for line in log_lines)


def test_stdlib_exceptions_keep_their_traceback(log_lines):
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("django").exception("failed")
    (line,) = [line for line in log_lines if "|failed" in line.splitlines()[0]]
    assert "|ERROR|" in line
    assert "ValueError: boom" in line  # the traceback travels with the record


def test_lines_outside_a_request_say_dash(log_lines):
    # A fresh thread starts with an empty context: no request, no id.
    thread = threading.Thread(target=lambda: logger.info("background job"))
    thread.start()
    thread.join()
    assert "-|INFO|campus_agent.tests.test_logging:<lambda>|background job" in log_lines


def test_noisy_http_client_loggers_stay_at_warning(log_lines):
    logging.getLogger("httpx").info("HTTP Request: GET https://example.edu.cn/?token=x")
    assert not any("HTTP Request" in line for line in log_lines)


async def _answer_by_path(scope, receive, send):
    """An ASGI app answering 400 to a query string that says so, else 200."""
    if scope["type"] != "http":
        return
    status = 400 if scope["query_string"] == b"refuse" else 200
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-length", b"0")]})
    await send({"type": "http.response.body", "body": b""})


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.mark.parametrize("level", ["INFO", "DEBUG"])
def test_uvicorns_access_line_of_a_turn_is_left_to_the_turn(monkeypatch, level):
    """uvicorn (a real one, its access log on) writes a line per request with its own handler, beside
    ours; a request that started a turn is left out of it below DEBUG: its turn writes its line
    (docs/operations.md#the-turn-line). The access logger is set as uvicorn leaves it (its own
    handler, not propagating), then as campus_agent.base.logging.logging_configure sets it."""
    import httpx

    from campus_agent.base.logging import turn_access_filter_install
    from testkit.servers import ThreadedAsgiServer

    access, written = logging.getLogger("uvicorn.access"), _Lines()
    for name, value in (("handlers", [written]), ("filters", []), ("propagate", False), ("level", logging.INFO)):
        monkeypatch.setattr(access, name, value)
    turn_access_filter_install(level)
    with ThreadedAsgiServer(_answer_by_path, access_log=True) as server, httpx.Client(base_url=server.url) as client:
        for method, path in [("POST", "/api/v1/chat"), ("POST", "/v1/chat/completions?stream=1"),
                             ("POST", "/api/v1/chat?refuse"), ("GET", "/api/v1/chat"),
                             ("POST", "/api/v1/conversations")]:
            client.request(method, path)
    seen = sorted(" ".join(m.groups()) for m in map(re.compile(r'"(\w+ \S+) HTTP/1\.1" (\d+)').search, written.lines))
    kept = ["GET /api/v1/chat 200", "POST /api/v1/chat?refuse 400", "POST /api/v1/conversations 200"]
    turns = ["POST /api/v1/chat 200", "POST /v1/chat/completions?stream=1 200"]
    assert seen == sorted(kept + (turns if level == "DEBUG" else []))
