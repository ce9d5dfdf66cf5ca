"""Request bodies refused before they are read (issue 42; docs/security.md#request-bodies-refused-before-they-are-read).

Each case is the attack itself against the project served by uvicorn: a client declares a 300 MB
body, sends its head and the first 64 KB, and then keeps the connection open without sending
more. A server that reads the body before it answers (Django's ASGI handler writes it to a
temporary file first) never answers; one that decides from the head alone (the caller, the
path's cap) answers at once, with the refusal in the shape of the API asked. A body sent without
Content-Length (chunked) is read only up to the cap.
"""

import json
import socket
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx
import pytest

from chat_app.accounts.api_keys import api_key_create
from chat_app.models import Message, Upload

pytestmark = pytest.mark.django_db(transaction=True)

DECLARED = 300 * 1024 * 1024
SENT = 64 * 1024  # what the client sends of it before it waits
ANSWER_WITHIN_SEC = 5.0


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> dict:
        return json.loads(self.body)


def _head(method: str, path: str, headers: dict[str, str]) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _answer(conn: socket.socket) -> Answer | None:
    """The response read from `conn` (its whole body, by Content-Length); None if none came in time."""
    data = b""
    deadline = time.monotonic() + ANSWER_WITHIN_SEC
    while b"\r\n\r\n" not in data:
        conn.settimeout(max(deadline - time.monotonic(), 0.01))
        try:
            chunk = conn.recv(65536)
        except (TimeoutError, ConnectionResetError):
            return None
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in header_lines)}
    while len(body) < int(headers.get("content-length", 0)):
        conn.settimeout(max(deadline - time.monotonic(), 0.01))
        body += conn.recv(65536)
    return Answer(int(status_line.split()[1]), headers, body)


def declared_but_not_sent(
    base_url: str, path: str, headers: dict[str, str], *, declared: int = DECLARED, method: str = "POST"
) -> Answer | None:
    """Declares `declared` bytes, sends SENT of them, and waits with the connection open."""
    url = urlsplit(base_url)
    with socket.create_connection((url.hostname, url.port), timeout=ANSWER_WITHIN_SEC) as conn:
        conn.sendall(_head(method, path, {**headers, "Content-Length": str(declared)}) + b"x" * SENT)
        return _answer(conn)


def chunked_past_the_cap(base_url: str, path: str, headers: dict[str, str], *, cap: int) -> Answer | None:
    """Sends a chunked body (no Content-Length) of the cap and 16 KB more, then waits with the
    chunked body left unfinished."""
    url = urlsplit(base_url)
    with socket.create_connection((url.hostname, url.port), timeout=ANSWER_WITHIN_SEC) as conn:
        conn.sendall(_head("POST", path, {**headers, "Transfer-Encoding": "chunked"}))
        piece = b"x" * 16 * 1024
        for _ in range(cap // len(piece) + 1):
            try:
                conn.sendall(b"%x\r\n" % len(piece) + piece + b"\r\n")
            except (BrokenPipeError, ConnectionResetError):
                break  # refused while sending: the answer is waiting
        return _answer(conn)


# --- the callers ------------------------------------------------------------------------------------


@pytest.fixture
def bearer(user, token_for) -> dict[str, str]:
    return {"Authorization": f"Bearer {token_for(user)}"}


@pytest.fixture
def key(user) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key_create(user=user, name='hostile')[1]}"}


JSON = {"Content-Type": "application/json"}
FORM = {"Content-Type": "application/x-www-form-urlencoded"}
MULTIPART = {"Content-Type": "multipart/form-data; boundary=xyz"}


def assert_envelope(answer: Answer | None, status: int, code: int) -> dict:
    assert answer is not None, "no answer: the server waits for the body it was declared"
    assert answer.status == status, (answer.status, answer.body[:300])
    assert answer.headers["content-type"].startswith("application/json"), answer.headers
    assert answer.headers.get("x-request-id"), answer.headers
    body = answer.json()
    assert set(body) == {"code", "message"} and body["code"] == code, body
    return body


def assert_openai(answer: Answer | None, status: int, code: str) -> dict:
    assert answer is not None, "no answer: the server waits for the body it was declared"
    assert answer.status == status, (answer.status, answer.body[:300])
    error = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == code, error
    return error


# --- anonymous: 401 before a byte of the body is read ----------------------------------------------


@pytest.mark.parametrize(
    ("path", "headers"),
    [
        ("/api/v1/chat", JSON),
        ("/api/v1/uploads", MULTIPART),
        ("/api/v1/conversations", JSON),
        ("/api/v1/api-keys", JSON),
        ("//api/v1/chat", JSON),  # a double slash is the same API
    ],
    ids=["chat", "uploads", "conversations", "api-keys", "double-slash"],
)
def test_an_anonymous_body_is_401_before_it_is_read(live_asgi, path, headers):
    body = assert_envelope(declared_but_not_sent(live_asgi, path, headers), 401, 40101)
    assert body["message"] == "token_missing"


def test_a_bad_token_or_a_dead_session_cookie_is_401_before_the_body(live_asgi):
    bad = declared_but_not_sent(live_asgi, "/api/v1/chat", {**JSON, "Authorization": "Bearer not-a-jwt"})
    assert assert_envelope(bad, 401, 40101)["message"] == "token_invalid"
    cookie = declared_but_not_sent(live_asgi, "/api/v1/uploads", {**MULTIPART, "Cookie": "sessionid=" + "x" * 32})
    assert assert_envelope(cookie, 401, 40101)["message"] == "token_missing"


def test_an_anonymous_openai_body_is_401_in_openais_shape(live_asgi):
    answer = declared_but_not_sent(live_asgi, "/v1/chat/completions", JSON)
    assert assert_openai(answer, 401, "missing_api_key")["type"] == "authentication_error"


# --- a known caller, or an endpoint without one: 413 on the declared length ---------------------------


def test_a_declared_body_over_the_paths_cap_is_413_before_it_is_read(live_asgi, bearer, key):
    chat = assert_envelope(declared_but_not_sent(live_asgi, "/api/v1/chat", {**JSON, **bearer}), 413, 41301)
    assert chat["message"] == "请求体过大（上限 64 KB）。"
    upload = assert_envelope(declared_but_not_sent(live_asgi, "/api/v1/uploads", {**MULTIPART, **bearer}), 413, 41301)
    assert upload["message"] == "文件不能超过 10 MB。"
    token = assert_envelope(declared_but_not_sent(live_asgi, "/api/v1/auth/token", JSON), 413, 41301)
    assert token["message"] == "请求体过大（上限 64 KB）。"
    assert_openai(declared_but_not_sent(live_asgi, "/v1/chat/completions", {**JSON, **key}), 413, "body_too_large")
    mcp = declared_but_not_sent(live_asgi, "/mcp", {**JSON, **key, "Accept": "application/json, text/event-stream"})
    assert assert_envelope(mcp, 413, 41301)["message"] == "请求体过大（上限 256 KB）。"
    assert_envelope(declared_but_not_sent(live_asgi, "/a2a/", {**JSON, **key, "A2A-Version": "1.0"}), 413, 41301)
    assert not Message.objects.exists() and not Upload.objects.exists()


def test_just_under_the_cap_is_not_refused_on_its_length(live_asgi, bearer, settings):
    """The control: a declared length within the cap is read (and then answered for its content)."""
    answer = httpx.post(f"{live_asgi}/api/v1/chat", content=b"[" * 1000 + b"]" * 1000, headers={**JSON, **bearer})
    assert answer.status_code == 400 and answer.json()["code"] == 40001


@pytest.mark.parametrize("path", ["/login/", "/admin/login/"])
def test_a_login_form_over_the_cap_is_a_page_saying_so(live_asgi, path):
    answer = declared_but_not_sent(live_asgi, path, FORM)
    assert answer is not None, "no answer: the server waits for the body it was declared"
    assert answer.status == 413 and answer.headers["content-type"].startswith("text/html"), answer.headers
    page = answer.body.decode()
    assert "提交的内容过大（上限 64 KB）" in page and '<html lang="zh-CN">' in page
    english = declared_but_not_sent(live_asgi, path, {**FORM, "Accept-Language": "en"})
    if path.startswith("/admin/"):  # staff work in Chinese whatever their browser says
        assert english.status == 413 and "提交的内容过大" in english.body.decode()
    else:
        assert english.status == 413 and "too large" in english.body.decode()


# --- no Content-Length: read up to the cap, no further -----------------------------------------------


def test_a_chunked_body_is_read_up_to_the_cap_and_no_further(live_asgi, bearer, key):
    chat = chunked_past_the_cap(live_asgi, "/api/v1/chat", {**JSON, **bearer}, cap=64 * 1024)
    assert assert_envelope(chat, 413, 41301)["message"] == "请求体过大（上限 64 KB）。"
    login = chunked_past_the_cap(live_asgi, "/login/", FORM, cap=64 * 1024)
    assert login is not None and login.status == 413
    mcp = chunked_past_the_cap(
        live_asgi, "/mcp", {**JSON, **key, "Accept": "application/json, text/event-stream"}, cap=256 * 1024
    )
    assert_envelope(mcp, 413, 41301)
    a2a = chunked_past_the_cap(live_asgi, "/a2a/", {**JSON, **key, "A2A-Version": "1.0"}, cap=64 * 1024)
    assert_envelope(a2a, 413, 41301)
    anonymous = chunked_past_the_cap(live_asgi, "/api/v1/uploads", MULTIPART, cap=64 * 1024)
    assert assert_envelope(anonymous, 401, 40101)["message"] == "token_missing"


def test_what_is_within_the_caps_still_gets_through(live_asgi, bearer, settings, tmp_path, agent_factory):
    """The controls: a chunked question, an upload of a few MB, a page login."""
    settings.LLM_BASE_URL = ""  # no model: keyword routing answers
    settings.MEDIA_ROOT = str(tmp_path)
    agent_factory()

    def chunks():
        yield b'{"message": '
        yield json.dumps("你好").encode() + b"}"

    with httpx.stream("POST", f"{live_asgi}/api/v1/chat", content=chunks(), headers={**JSON, **bearer}) as answer:
        assert answer.status_code == 200 and b'"type":"done"' in answer.read()
    text = ("课表\n" * 500_000).encode()  # 3.5 MB
    upload = httpx.post(f"{live_asgi}/api/v1/uploads", files={"file": ("课表.txt", text)}, headers=bearer, timeout=30)
    assert upload.status_code == 201, upload.text
    assert upload.json()["size"] == len(text)
