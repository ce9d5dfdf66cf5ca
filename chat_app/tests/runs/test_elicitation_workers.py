"""An MCP server's question across workers (issue 23 point 3): the turn pauses on worker A for the
student's answer to a form; the answer is posted to worker B (behind one address, any worker
answers), which runs the call again there and hands the server the answer, its frames reaching
A's client through Redis. Fixtures: worker_fixtures.py; the MCP server (built with the mcp SDK)
runs in this test process, on loopback."""
import httpx
import pytest

from testkit.mcp.servers import HttpMcpServer
from testkit.processes import manage
from testkit.web.sse import parse_blocks, read_rest, read_until

ADD_COURSES = """
from agents_app.models import Agent, McpService
service = McpService.objects.create(name="courses", display_name="选课", protocol="streamable-http",
                                    config={{"url": "{url}"}}, timeout_sec=10)
Agent.objects.get(is_default=True).mcp_services.add(service)
"""
ANSWER = {"email": "alice@example.edu.cn", "credits": 2, "campus": "东区", "notify": True, "note": ""}


@pytest.fixture
def courses(worker_env):
    with HttpMcpServer("streamable-http") as server:
        done = manage("shell", "-c", ADD_COURSES.format(url=server.url), env=worker_env)
        assert done.returncode == 0, done.stderr
        yield server


def test_asked_on_a_answered_on_b_goes_on_in_as_stream(workers, courses, token, llm_server):
    (a_url, _), (b_url, _) = workers
    llm_server.reply_tool_calls(("courses__enrol", {}), text="请填一下表。")
    llm_server.reply_text("选好了。")
    client = httpx.Client(base_url=a_url, timeout=20)
    response = client.send(client.build_request("POST", "/api/v1/chat", json={"message": "帮我选课"},
                                                headers=token), stream=True)
    try:
        blocks, raw = read_until(response, lambda f: f["type"] == "elicitation_required")
        run_id, asked = blocks[0][1]["run_id"], blocks[-1][1]
        assert asked["service"] == "选课" and asked["defaults"]["credits"] == 3
        answered = httpx.post(f"{b_url}/api/v1/runs/{run_id}/approvals", headers=token, timeout=20,
                              json={"call_id": asked["call_id"], "action": "accept", "content": ANSWER})  # on B
        assert answered.status_code == 200 and answered.json()["resumed"] is True, answered.text
        rest = read_rest(response)  # A's client: the run now goes on on B
    finally:
        response.close()
        client.close()
    later, _ = parse_blocks(raw[raw.rfind("\n\n") + 2:] + rest)
    assert later[-1][1]["type"] == "done" and later[-1][1]["full_text"] == "请填一下表。选好了。"
    ids = [i for i, _ in blocks + later if i is not None]
    assert ids == list(range(1, len(ids) + 1))  # one numbering across the two workers
    assert [(e["action"], e["content"]) for e in courses.elicitations] == [("cancel", None), ("accept", ANSWER)]
