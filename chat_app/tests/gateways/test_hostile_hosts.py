"""Hosts and error shapes (issue 42; docs/security.md#hosts-and-error-shapes), against the project
served by uvicorn.

- Every path checks the Host against ALLOWED_HOSTS, the A2A server and its card too: a card that
  named `http://evil.example/a2a/` told clients to send their keys there.
- Under the API prefixes every error is JSON in the shape of that API (docs/api.md, clients.md):
  Django's own answers (a 400 for a Host or a form of too many fields, a CSRF failure, a 404 of a
  path with a double slash) were its HTML pages.
"""

import json
import re

import httpx
import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from chat_app.accounts.api_keys import api_key_create

pytestmark = pytest.mark.django_db(transaction=True)

EVIL = {"Host": "evil.example"}


@pytest.fixture
def key(user) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key_create(user=user, name='hostile')[1]}"}


def assert_envelope(answer: httpx.Response, status: int, code: int) -> dict:
    assert answer.status_code == status, (answer.status_code, answer.text[:300])
    assert answer.headers["content-type"].startswith("application/json"), answer.text[:300]
    assert answer.headers["x-request-id"]
    body = answer.json()
    assert set(body) == {"code", "message"} and body["code"] == code, body
    return body


def assert_openai(answer: httpx.Response, status: int) -> dict:
    assert answer.status_code == status, (answer.status_code, answer.text[:300])
    assert answer.headers["content-type"].startswith("application/json"), answer.text[:300]
    error = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    return error


# --- Host --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/.well-known/agent-card.json"),
        ("POST", "/a2a/"),
        ("POST", "/mcp"),
        ("GET", "/api/v1/agents"),
        ("POST", "/api/v1/chat"),
        ("GET", "/.well-known/oauth-protected-resource/mcp"),
    ],
)
def test_a_foreign_host_is_a_json_400_on_every_api_path(live_asgi, key, method, path):
    answer = httpx.request(method, live_asgi + path, headers={**EVIL, **key}, content=b"{}")
    body = assert_envelope(answer, 400, 40001)
    assert body["message"] == "请求的主机名（Host）不是本站的。"
    assert "evil.example" not in answer.text


def test_a_foreign_host_is_refused_in_openais_shape_under_v1(live_asgi, key):
    error = assert_openai(httpx.get(f"{live_asgi}/v1/models", headers={**EVIL, **key}), 400)
    assert error["type"] == "invalid_request_error"
    english = httpx.get(f"{live_asgi}/v1/models", headers={**EVIL, **key, "Accept-Language": "en"})
    assert "Host" in english.json()["error"]["message"] and "主机" not in english.text


def test_a_foreign_host_on_a_page_is_a_page(live_asgi):
    answer = httpx.get(f"{live_asgi}/login/", headers=EVIL)
    assert answer.status_code == 400 and answer.headers["content-type"].startswith("text/html")
    assert "evil.example" not in answer.text


def test_probes_are_not_asked_for_a_host(live_asgi):
    assert httpx.get(f"{live_asgi}/healthz", headers={"Host": "10.0.0.7:8000"}).status_code == 200


def test_the_agent_card_names_only_a_host_of_the_site(live_asgi, agent, settings):
    settings.ALLOWED_HOSTS = ["127.0.0.1", "agent.example.edu.cn"]
    card = httpx.get(f"{live_asgi}/.well-known/agent-card.json", headers={"Host": "agent.example.edu.cn"})
    assert card.status_code == 200
    assert card.json()["supportedInterfaces"][0]["url"] == "http://agent.example.edu.cn/a2a/"
    forged = httpx.get(
        f"{live_asgi}/.well-known/agent-card.json",
        headers={"Host": "agent.example.edu.cn", "X-Forwarded-Host": "evil.example"},
    )
    assert "evil.example" not in forged.text


# --- what Django answers itself --------------------------------------------------------------------


def test_a_form_of_2000_fields_is_a_json_400(live_asgi, user, token_for):
    fields = {f"f{i}": (None, "1") for i in range(2000)}
    answer = httpx.post(
        f"{live_asgi}/api/v1/uploads", files=fields, headers={"Authorization": f"Bearer {token_for(user)}"}
    )
    assert assert_envelope(answer, 400, 40001)["message"] == "表单的字段或文件太多。"


def test_a_method_a_v1_path_does_not_take_is_a_json_405(live_asgi, key):
    error = assert_openai(httpx.delete(f"{live_asgi}/v1/models", headers=key), 405)
    assert error["code"] == "method_not_allowed"
    cookie_only = httpx.delete(f"{live_asgi}/v1/models", headers={"Cookie": "csrftoken=x"})
    assert cookie_only.status_code in (401, 405) and cookie_only.json()["error"]


@pytest.mark.parametrize("path", ["//mcp", "//a2a/", "//api/v1/chat", "//v1/models", "/mcp/x", "/api/v1/x/"])
def test_a_path_beside_an_api_is_a_json_404(live_asgi, key, path):
    answer = httpx.post(live_asgi + path, headers={**key, "Content-Type": "application/json"}, content=b"{}")
    if path.startswith("//v1"):
        assert assert_openai(answer, 404)["code"] == "not_found"
    else:
        assert_envelope(answer, 404, 40401)


def _api_paths() -> list[str]:
    """Every route under /api/v1/ and /v1/, with its converters filled in."""
    filled = {"uuid": "00000000-0000-4000-8000-000000000000", "int": "1", "str": "x", "path": "x", "slug": "x"}

    def walk(patterns, prefix):
        for entry in patterns:
            route = prefix + str(entry.pattern)
            if isinstance(entry, URLResolver):
                yield from walk(entry.url_patterns, route)
            elif isinstance(entry, URLPattern):
                yield "/" + re.sub(r"<(?:(\w+):)?\w+>", lambda m: filled[m.group(1) or "str"], route)

    return sorted(p for p in walk(get_resolver().url_patterns, "") if p.startswith(("/api/v1/", "/v1/")))


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "PATCH", "DELETE"])
def test_every_api_route_answers_every_method_with_json(live_asgi, client, user, method):
    """A sweep: anonymous, with a page session and no CSRF token, and with a bad body; whatever
    the status, under the API prefixes it is JSON."""
    paths = _api_paths()
    assert len(paths) > 25
    client.force_login(user)
    session = {"Cookie": f"sessionid={client.cookies['sessionid'].value}; csrftoken=x"}
    for path in paths:
        for headers in ({}, session):
            answer = httpx.request(
                method,
                live_asgi + path,
                headers={**headers, "Content-Type": "application/json"},
                content=b"{not json" if method != "GET" else None,
            )
            if answer.status_code < 400:
                continue
            assert answer.headers["content-type"].startswith("application/json"), (
                path,
                answer.status_code,
                answer.text[:200],
            )
            body = answer.json()
            assert set(body) == {"code", "message"} or set(body) == {"error"}, (path, body)
            assert json.dumps(body)
