"""The body caps of campus_agent/intake.py and the nginx example of docs/operations.md agree (issue 42:
the example's `client_max_body_size 1m` refused every upload the app takes, up to 10 MB). The
attacks themselves are in chat_app/tests/gateways/test_hostile_bodies.py."""

import re
from pathlib import Path

from django.conf import settings

from campus_agent.intake import body_rule

UNITS = {"": 1, "k": 1024, "m": 1024 * 1024}
KNOWLEDGE_UPLOAD = "/admin/knowledge_app/knowledgedocument/upload/"


def _size(text: str) -> int:
    number, unit = re.fullmatch(r"(\d+)([km]?)", text.lower()).groups()
    return int(number) * UNITS[unit]


def test_each_path_has_the_cap_of_its_setting():
    assert body_rule("/api/v1/uploads").cap() == settings.UPLOAD_MAX_BYTES + 64 * 1024
    assert body_rule("/v1/chat/completions").cap() == settings.OPENAI_API_BODY_MAX_BYTES
    assert body_rule("/mcp").cap() == settings.MCP_MAX_BODY_BYTES
    assert body_rule(KNOWLEDGE_UPLOAD).cap() == settings.KNOWLEDGE_UPLOAD_MAX_BYTES
    assert body_rule(KNOWLEDGE_UPLOAD).caller_first  # a stranger's 100 MB is refused on its head
    for path in ("/api/v1/chat", "/api/v1/auth/token", "/a2a/", "/login/", "/admin/login/", "/demo/x"):
        assert body_rule(path).cap() == settings.DATA_UPLOAD_MAX_MEMORY_SIZE, path
    assert body_rule("//api/v1/chat") is body_rule("/api/v1/chat")
    assert [
        p
        for p in ("/api/v1/chat", "/v1/models", "/api/v1/auth/token", "/mcp", "/a2a/", "/login/")
        if body_rule(p).caller_first
    ] == ["/api/v1/chat", "/v1/models"]


def test_the_nginx_example_lets_the_app_refuse_each_body_first():
    """Each location's `client_max_body_size` is above the app's cap for its path (so the app, not
    nginx, answers the 413, in the API's shape) and at most twice it; bodies are passed on as they
    arrive, so the app's 401 comes before the body is read."""
    operations = (Path(settings.BASE_DIR) / "docs" / "operations.md").read_text(encoding="utf-8")
    block = re.search(r"```nginx\n(.*?)```", operations, re.DOTALL).group(1)
    assert "proxy_request_buffering off;" in block
    default = _size(re.search(r"^    client_max_body_size (\w+);", block, re.MULTILINE).group(1))
    locations = dict(re.findall(r"location = (\S+) \{[^}]*?client_max_body_size (\w+);", block))
    assert set(locations) == {"/api/v1/uploads", "/v1/chat/completions", "/mcp", KNOWLEDGE_UPLOAD}
    for path in (
        "/api/v1/uploads",
        "/v1/chat/completions",
        "/mcp",
        KNOWLEDGE_UPLOAD,
        "/api/v1/chat",
        "/api/v1/conversations",
        "/login/",
        "/a2a/",
    ):
        cap = body_rule(path).cap()
        nginx = _size(locations[path]) if path in locations else default
        assert cap < nginx <= 2 * cap, (path, cap, nginx)
