"""A student's authorization across workers (issue 23 point 2): the turn pauses on worker A for
the student's account at an MCP service; the authorization server sends the browser back to
worker B (behind one address, any worker answers), which takes the code and lets the run go on
there, its frames reaching A's client through Redis. The tokens are in the database, so A then
calls the service as that student too. Fixtures: worker_fixtures.py; the MCP server and its
authorization server (built with the mcp SDK) run in this test process, on loopback."""
import httpx
import pytest

from testkit.mcp.oauth_servers import OAuthMcpServer
from testkit.processes import manage
from testkit.web.sse import parse_blocks, read_rest, read_until

ADD_LIBRARY = """
from agents_app.models import Agent, McpService
service = McpService.objects.create(name="library", display_name="图书馆", protocol="streamable-http",
                                    config={{"url": "{url}", "oauth": {{}}}}, timeout_sec=10)
Agent.objects.get(is_default=True).mcp_services.add(service)
"""


@pytest.fixture
def library(worker_env):
    with OAuthMcpServer() as server:
        done = manage("shell", "-c", ADD_LIBRARY.format(url=server.url), env=worker_env)
        assert done.returncode == 0, done.stderr
        yield server


def test_paused_on_a_authorized_through_b_goes_on_in_as_stream(workers, library, token, llm_server):
    (a_url, _), (b_url, _) = workers
    llm_server.reply_tool_calls(("library__connect_account", {}), text="先连接图书馆账号。")
    llm_server.reply_tool_calls(("library__whoami", {}))
    llm_server.reply_text("你是 alice。")
    client = httpx.Client(base_url=a_url, timeout=20)
    response = client.send(client.build_request("POST", "/api/v1/chat", json={"message": "我借了哪些书"},
                                                headers=token), stream=True)
    try:
        blocks, raw = read_until(response, lambda f: f["type"] == "authorization_required")
        asked = blocks[-1][1]
        back = httpx.get(asked["url"], follow_redirects=False, timeout=10).headers["location"]
        callback = httpx.URL(back)
        done = httpx.get(f"{b_url}{callback.raw_path.decode()}", headers=token, timeout=20)  # on B
        assert done.status_code == 302, done.text
        rest = read_rest(response)  # A's client: the run now goes on on B
    finally:
        response.close()
        client.close()
    later, _ = parse_blocks(raw[raw.rfind("\n\n") + 2:] + rest)
    assert later[-1][1]["type"] == "done" and later[-1][1]["full_text"] == "先连接图书馆账号。你是 alice。"
    ids = [i for i, _ in blocks + later if i is not None]
    assert ids == list(range(1, len(ids) + 1))  # one numbering across the two workers

    # A, which never saw the callback, calls the service as the student: the tokens are stored.
    llm_server.reply_tool_calls(("library__whoami", {}))
    llm_server.reply_text("还是你。")
    with httpx.Client(base_url=a_url, timeout=20) as again:
        with again.stream("POST", "/api/v1/chat", json={"message": "再查一次"}, headers=token) as second:
            frames, _ = read_until(second, lambda f: f["type"] == "done")
    results = [f for _, f in frames if f["type"] == "tool_result"]
    assert [(r["tool"], r["ok"]) for r in results] == [("library__whoami", True)]
    assert len(library.authorize_requests) == 1
