"""Every HTML page carries the Content-Security-Policy (issue 9) and needs nothing it forbids:
no inline script, no inline style, no event-handler attributes. The browser tests
(test_page_csp.py) check the same pages in Chromium; these run without one.
"""
from html.parser import HTMLParser

import pytest
from django.test import Client
from django.urls import reverse

from agents_app.models import Agent, McpService
from chat_app.models import Conversation

pytestmark = pytest.mark.django_db

EXPECTED_DIRECTIVES = {
    "default-src": "'self'",
    "script-src": "'self'",
    "style-src": "'self'",
    "img-src": "'self' data:",
    "connect-src": "'self'",
    "object-src": "'none'",
    "base-uri": "'self'",
    "frame-ancestors": "'none'",
    "form-action": "'self'",
}


def csp_directives(response) -> dict[str, str]:
    header = response.headers.get("Content-Security-Policy", "")
    parts = (p.strip().split(None, 1) for p in header.split(";") if p.strip())
    return {p[0]: p[1] if len(p) > 1 else "" for p in parts}


class InlineCode(HTMLParser):
    """Collects what a strict CSP blocks: inline scripts, <style> elements, style and on*
    attributes."""

    def __init__(self):
        super().__init__()
        self.found: list[str] = []
        self._in_inline_script = False

    def handle_starttag(self, tag, attrs):
        named = dict(attrs)
        if tag == "script" and "src" not in named and named.get("type") != "application/json":
            self._in_inline_script = True
        if tag == "style":
            self.found.append("<style> element")
        for name, value in attrs:
            if name == "style" or name.startswith("on"):
                self.found.append(f"<{tag} {name}={value!r}>")

    def handle_data(self, data):
        if self._in_inline_script and data.strip():
            self.found.append(f"inline script: {data.strip()[:60]}")

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_inline_script = False


def inline_code(html: str) -> list[str]:
    parser = InlineCode()
    parser.feed(html)
    return parser.found


def assert_strict_html_page(response, status: int = 200) -> None:
    assert response.status_code == status
    assert response["Content-Type"].startswith("text/html")
    assert csp_directives(response) == EXPECTED_DIRECTIVES
    assert inline_code(response.content.decode()) == []


@pytest.fixture
def agent_row(db) -> Agent:
    return Agent.objects.create(slug="xiaozhi", name="校园小智", is_default=True)


def test_student_pages_carry_the_policy(client, user, agent_row):
    assert_strict_html_page(client.get(reverse("login")))
    client.force_login(user)
    conversation = Conversation.objects.create(user=user, agent=agent_row, title="</script><script>x()</script>")
    assert_strict_html_page(client.get(reverse("chat")))
    page = client.get(reverse("chat-conversation", args=[conversation.id]))
    assert_strict_html_page(page)
    assert 'type="application/json"' in page.content.decode()  # the page's first state is data


def test_admin_pages_carry_the_policy(staff_client, agent_row):
    assert_strict_html_page(Client().get(reverse("admin:login")))
    service = McpService.objects.create(name="weather", protocol="streamable-http", config={"url": "http://127.0.0.1:9/mcp"})
    for url in (
        reverse("admin:index"),
        reverse("admin:agents_app_agent_change", args=[agent_row.pk]),
        reverse("admin:agents_app_agent_add"),
        reverse("admin:agents_app_mcpservice_changelist"),
        reverse("admin:agents_app_mcpservice_change", args=[service.pk]),
        reverse("admin:subagents_app_subagent_changelist"),
    ):
        assert_strict_html_page(staff_client.get(url))
    confirm = staff_client.post(
        reverse("admin:agents_app_mcpservice_changelist"),
        {"action": "delete_selected", "_selected_action": [service.pk]},
    )
    assert_strict_html_page(confirm)  # the action's confirmation page


def test_api_docs_carry_the_policy_and_load_their_init_script_from_a_url(client):
    page = client.get(reverse("api-docs"))
    assert_strict_html_page(page)
    script = client.get(reverse("api-docs") + "?script=")
    assert script.status_code == 200 and script["Content-Type"].startswith("application/javascript")
    assert "SwaggerUIBundle(" in script.content.decode()


def test_error_pages_carry_the_policy(client):
    assert_strict_html_page(client.get("/no-such-page/"), status=404)
    # A stale login form (no CSRF cookie): Django's CSRF failure page, ours without inline styles.
    strict = Client(enforce_csrf_checks=True)
    assert_strict_html_page(strict.post(reverse("login"), {"username": "a", "password": "b"}), status=403)


def test_api_answers_carry_the_policy_too(client):
    # JSON is no page, but a policy on every response costs nothing and covers a browser that
    # is made to render one.
    response = client.get("/api/v1/agents")
    assert csp_directives(response) == EXPECTED_DIRECTIVES
