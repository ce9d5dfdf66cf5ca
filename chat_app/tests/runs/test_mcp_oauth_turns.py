"""A turn that needs the student's own account at an MCP service (issue 23 point 2), end to end on
loopback: the project on uvicorn, the scripted model, and an MCP server protected by its own OAuth
2.1 authorization server, both built with the mcp SDK (testkit/mcp/oauth_servers.py).

The call that finds no authorization does not fail: the run waits (`authorization_required`, the
authorization page's URL in it), the student's browser comes back from that page to
`/mcp/oauth/callback/`, the gateway takes the code, and the same stream goes on with the call
answered as that student. The loopback authorization server approves at once, so "the student at
the page" is a GET of its URL that reads where it redirects."""
import httpx
import pytest
from loguru import logger

from agents_app.mcp.tools import OAUTH_REFUSED_NOTICE, OAUTH_REFUSED_REASON
from agents_app.models import McpOAuthGrant, McpOAuthPending, McpService
from agents_app.runtime.loop import AUTHORIZED_TEXT, NOT_AUTHORIZED_TEXT
from chat_app.models import Message, Run, Wait
from testkit.mcp.oauth_servers import OAuthMcpServer, ResourceMcpServer
from testkit.polling import wait_for
from testkit.web.sse import parse_blocks, read_rest, read_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.embedded]


@pytest.fixture
def library(settings, live_asgi, agent_factory):
    settings.MCP_OAUTH_REDIRECT_URL = f"{live_asgi}/mcp/oauth/callback/"
    with OAuthMcpServer() as server:
        service = McpService.objects.create(name="library", display_name="图书馆", protocol="streamable-http",
                                            config={"url": server.url, "oauth": {}}, timeout_sec=10)
        agent_factory(mcp_services=[service])
        yield server


def _asked(live_asgi, headers, client):
    """Starts the turn and reads its stream up to `authorization_required`: (response, blocks)."""
    response = client.stream("POST", "/api/v1/chat", json={"message": "我借了哪些书"}, headers=headers)
    opened = response.__enter__()
    blocks, raw = read_until(opened, lambda f: f["type"] == "authorization_required")
    return opened, response, blocks, raw


def _page_answer(url: str) -> str:
    """The student at the authorization page, which approves at once: where it sends them back."""
    answer = httpx.get(url, follow_redirects=False, timeout=10)
    assert answer.status_code == 302
    return answer.headers["location"]


def test_the_run_waits_for_the_students_account_and_goes_on_after_the_callback(
    live_asgi, llm_settings, library, user, auth_headers
):
    # Nobody has listed the service's tools (that needs a student's session): the model is offered
    # the way to connect it; once connected, the resumed turn is offered its real tools.
    llm_settings.reply_tool_calls(("library__connect_account", {}), text="我查一下你的借阅。")
    llm_settings.reply_tool_calls(("library__whoami", {}))
    llm_settings.reply_text("你是 alice。")
    with httpx.Client(base_url=live_asgi, timeout=20) as client:
        opened, response, blocks, raw = _asked(live_asgi, auth_headers, client)
        try:
            session, asked = blocks[0][1], blocks[-1][1]
            assert [f["type"] for _, f in blocks if f["type"] != "chunk"] == [
                "session", "tool_call", "authorization_required"]
            assert asked["service"] == "图书馆" and asked["tool"] == "library__connect_account" and asked["expires_at"]
            offered = [t["function"]["name"] for t in llm_settings.requests[0].tools]
            assert offered == ["library__connect_account"]
            assert asked["url"].startswith(f"{library.issuer}/authorize?")
            run = Run.objects.get(id=session["run_id"])
            assert run.status == Run.Status.WAITING and run.slot_key == ""  # no slot held while it waits
            waiting = Wait.objects.get(run=run)
            assert (waiting.kind, waiting.status, waiting.ask["service"]) == ("authorization", "pending", "图书馆")
            assert McpOAuthPending.objects.filter(user=user).count() == 1

            # Approving it as if it were an approval is refused: the authorization itself approves it.
            refused = client.post(f"/api/v1/runs/{run.id}/approvals", headers=auth_headers,
                                  json={"call_id": asked["call_id"], "decision": "approve"})
            assert refused.status_code == 409 and "连接账号" in refused.json()["message"]

            back = _page_answer(asked["url"])
            assert back.startswith(f"{live_asgi}/mcp/oauth/callback/?")
            done = client.get(back.removeprefix(live_asgi), headers=auth_headers)  # the browser comes back
            assert done.status_code == 302 and done.headers["location"] == f"/c/{session['conversation_id']}/"
            rest = read_rest(opened)
        finally:
            response.__exit__(None, None, None)
    later, _ = parse_blocks(raw[raw.rfind("\n\n") + 2:] + rest)
    results = [f for _, f in later if f["type"] == "tool_result"]
    assert [(r["tool"], r["ok"]) for r in results] == [("library__connect_account", True), ("library__whoami", True)]
    assert later[-1][1]["type"] == "done" and later[-1][1]["full_text"] == "我查一下你的借阅。你是 alice。"
    assert "library__whoami" in [t["function"]["name"] for t in llm_settings.requests[1].tools]
    tool_rows = [m for m in Message.objects.filter(conversation_id=session["conversation_id"]).order_by("seq")
                 if m.role == "tool"]
    assert tool_rows[0].content == AUTHORIZED_TEXT
    assert tool_rows[1].content == "alice"  # called as the student, with their token
    assert McpOAuthGrant.objects.filter(user=user).count() == 1 and not McpOAuthPending.objects.exists()
    assert Wait.objects.get(run=run).status == Wait.Status.APPROVED
    wait_for(lambda: Run.objects.filter(id=run.id, status=Run.Status.FINISHED).exists(), what="the run's end")

    # The next turn calls the service at once: the stored authorization serves.
    llm_settings.reply_tool_calls(("library__whoami", {}))
    llm_settings.reply_text("还是你。")
    with httpx.Client(base_url=live_asgi, timeout=20) as client:
        with client.stream("POST", "/api/v1/chat", json={"message": "再查一次"}, headers=auth_headers) as again:
            blocks, _ = read_until(again, lambda f: f["type"] == "done")
    assert "authorization_required" not in [f["type"] for _, f in blocks]
    assert len(library.authorize_requests) == 1


def test_saying_no_at_the_authorization_page_tells_the_model_the_account_is_not_connected(
    live_asgi, llm_settings, library, user, auth_headers
):
    llm_settings.reply_tool_calls(("library__connect_account", {}))
    llm_settings.reply_text("好的，不查了。")
    with httpx.Client(base_url=live_asgi, timeout=20) as client:
        opened, response, blocks, raw = _asked(live_asgi, auth_headers, client)
        try:
            asked = blocks[-1][1]
            state = httpx.URL(asked["url"]).params["state"]
            page = client.get("/mcp/oauth/callback/", params={"error": "access_denied", "state": state},
                              headers=auth_headers)
            assert page.status_code == 200 and "没有连接“图书馆”账号" in page.text
            rest = read_rest(opened)
        finally:
            response.__exit__(None, None, None)
    later, _ = parse_blocks(raw[raw.rfind("\n\n") + 2:] + rest)
    [result] = [f for _, f in later if f["type"] == "tool_result"]
    assert result["ok"] is False and result["error"] == NOT_AUTHORIZED_TEXT["rejected"][1]
    assert llm_settings.last_request.messages[-1]["content"] == NOT_AUTHORIZED_TEXT["rejected"][0]
    assert not McpOAuthGrant.objects.exists() and library.token_requests == []
    assert not McpOAuthPending.objects.filter(state=state).exists()  # the server's own "no" ends it


def test_the_callback_refuses_what_is_not_the_students_own_answer(
    live_asgi, llm_settings, library, user, other_user, auth_headers, token_for
):
    llm_settings.reply_tool_calls(("library__connect_account", {}))
    llm_settings.reply_text("好的。")
    with httpx.Client(base_url=live_asgi, timeout=20) as client:
        opened, response, blocks, _ = _asked(live_asgi, auth_headers, client)
        try:
            back = _page_answer(blocks[-1][1]["url"]).removeprefix(live_asgi)
            other = {"Authorization": f"Bearer {token_for(other_user)}"}
            stolen = client.get(back, headers=other)  # another student with the same link: not theirs
            assert stolen.status_code == 400 and "已失效" in stolen.text
            assert client.get("/mcp/oauth/callback/?state=forged&code=x", headers=auth_headers).status_code == 400
            assert client.get("/mcp/oauth/callback/?" + "x" * 5000, headers=auth_headers).status_code == 400
            anonymous = client.get(back)  # not signed in: to the login page, and back here after
            assert anonymous.status_code == 302 and anonymous.headers["location"].startswith("/login/?next=")
            assert client.get(back, headers=auth_headers).status_code == 302  # still good for its owner
            assert client.get(back, headers=auth_headers).status_code == 400  # a code is taken once
            read_rest(opened)
        finally:
            response.__exit__(None, None, None)
    assert McpOAuthGrant.objects.filter(user=user).count() == 1
    assert not McpOAuthGrant.objects.filter(user=other_user).exists()


def test_an_answer_that_does_not_check_out_leaves_the_students_link_good(
    live_asgi, llm_settings, library, user, auth_headers
):
    """A callback with another issuer (RFC 9207: a mix-up, or a link someone crafted), without a
    code, or with a code the server will not exchange, and a "no" that names another issuer, are
    refused and end nothing: the student's own answer from the page still connects the account."""
    llm_settings.reply_tool_calls(("library__connect_account", {}))
    llm_settings.reply_tool_calls(("library__whoami", {}))
    llm_settings.reply_text("你是 alice。")
    with httpx.Client(base_url=live_asgi, timeout=20) as client:
        opened, response, blocks, raw = _asked(live_asgi, auth_headers, client)
        try:
            back = httpx.URL(_page_answer(blocks[-1][1]["url"]))
            state = back.params["state"]
            answers = [
                back.copy_set_param("iss", "https://evil.example"),
                back.copy_remove_param("code"),
                back.copy_set_param("code", "not-a-code-of-the-server"),
                httpx.URL(f"{live_asgi}/mcp/oauth/callback/", params={"error": "access_denied", "state": state,
                                                                     "iss": "https://evil.example"}),
            ]
            for answer in answers:
                page = client.get(str(answer).removeprefix(live_asgi), headers=auth_headers)
                assert page.status_code == 400 and "无法通过校验" in page.text, answer
                assert McpOAuthPending.objects.count() == 1
            done = client.get(str(back).removeprefix(live_asgi), headers=auth_headers)  # the student's own
            assert done.status_code == 302
            rest = read_rest(opened)
        finally:
            response.__exit__(None, None, None)
    later, _ = parse_blocks(raw[raw.rfind("\n\n") + 2:] + rest)
    assert later[-1][1]["full_text"] == "你是 alice。"
    assert McpOAuthGrant.objects.filter(user=user).count() == 1 and not McpOAuthPending.objects.exists()


def test_a_known_tool_of_a_service_the_student_has_not_connected_waits_for_them_too(
    live_asgi, llm_settings, library, user, other_user, auth_headers, token_for
):
    """Once any student connected the service its tools are listed (the list is the server's):
    another student's call of one waits for their own authorization, then runs as them."""
    from asgiref.sync import async_to_sync

    from agents_app.mcp.person import person_use
    from agents_app.mcp.pool import mcp_pool_close
    from agents_app.mcp.tools import mcp_service_tool_infos
    from testkit.mcp.conformance_client import HeadlessPerson

    service = McpService.objects.get(name="library")

    async def first_student_lists():
        with person_use(HeadlessPerson()):
            await mcp_service_tool_infos(service=service, user_id=other_user.pk)
        await mcp_pool_close()

    library.subject = "bob"
    async_to_sync(first_student_lists)()  # in this process: the live server shares the tool cache
    library.subject = "alice"
    llm_settings.reply_tool_calls(("library__whoami", {}))
    llm_settings.reply_text("你是 alice。")
    with httpx.Client(base_url=live_asgi, timeout=20) as client:
        opened, response, blocks, raw = _asked(live_asgi, auth_headers, client)
        try:
            asked = blocks[-1][1]
            assert asked["tool"] == "library__whoami"
            assert client.get(_page_answer(asked["url"]).removeprefix(live_asgi), headers=auth_headers).status_code == 302
            rest = read_rest(opened)
        finally:
            response.__exit__(None, None, None)
    later, _ = parse_blocks(raw[raw.rfind("\n\n") + 2:] + rest)
    assert later[-1][1]["full_text"] == "你是 alice。"
    [row] = [m for m in Message.objects.filter(role="tool")]
    assert row.content == "alice"


def test_an_approved_call_that_then_needs_the_students_account_waits_again(
    live_asgi, llm_settings, library, user, other_user, auth_headers
):
    """An ask-first tool of a per-student service: approved, its call finds no authorization of
    this student, and the same round waits once more, for the account (not a failed result)."""
    from asgiref.sync import async_to_sync

    from agents_app.mcp.person import person_use
    from agents_app.mcp.pool import mcp_pool_close
    from agents_app.mcp.tools import mcp_service_tool_infos
    from testkit.mcp.conformance_client import HeadlessPerson

    service = McpService.objects.get(name="library")
    service.tool_approvals = {"whoami": "ask"}
    service.save(update_fields=["tool_approvals"])

    async def first_student_lists():
        with person_use(HeadlessPerson()):
            await mcp_service_tool_infos(service=service, user_id=other_user.pk)
        await mcp_pool_close()

    library.subject = "bob"
    async_to_sync(first_student_lists)()
    library.subject = "alice"
    llm_settings.reply_tool_calls(("library__whoami", {}))
    llm_settings.reply_text("你是 alice。")
    with httpx.Client(base_url=live_asgi, timeout=20) as client:
        response = client.stream("POST", "/api/v1/chat", json={"message": "我是谁"}, headers=auth_headers)
        opened = response.__enter__()
        try:
            blocks, raw = read_until(opened, lambda f: f["type"] == "approval_required")
            run_id, call_id = blocks[0][1]["run_id"], blocks[-1][1]["call_id"]
            approved = client.post(f"/api/v1/runs/{run_id}/approvals", headers=auth_headers,
                                   json={"call_id": call_id, "decision": "approve"})
            assert approved.status_code == 200 and approved.json()["resumed"] is True
            again, raw = read_until(opened, lambda f: f["type"] == "authorization_required")
            asked = again[-1][1]
            assert (asked["call_id"], asked["service"]) == (call_id, "图书馆")
            assert "tool_result" not in [f["type"] for _, f in again]
            assert [(a.kind, a.status) for a in Wait.objects.filter(run_id=run_id).order_by("pause_seq")] == [
                ("approval", "approved"), ("authorization", "pending")]
            assert client.get(_page_answer(asked["url"]).removeprefix(live_asgi), headers=auth_headers).status_code == 302
            rest = read_rest(opened)
        finally:
            response.__exit__(None, None, None)
    later, _ = parse_blocks(raw[raw.rfind("\n\n") + 2:] + rest)
    assert later[-1][1]["full_text"] == "你是 alice。"
    assert [m.content for m in Message.objects.filter(role="tool")] == ["alice"]


def test_the_campus_oidc_provider_serves_as_the_services_authorization_server(
    settings, live_asgi, llm_settings, oidc_provider, agent_factory, user, auth_headers
):
    """A campus service that trusts the campus login: its RFC 9728 metadata names the campus
    OpenID Connect provider (OIDC discovery, PKCE required, a client staff registered there), and
    the same pause and callback connect the student's account through it."""
    from testkit.identity.oidc_provider import CLIENT_ID, CLIENT_SECRET

    settings.MCP_OAUTH_REDIRECT_URL = f"{live_asgi}/mcp/oauth/callback/"
    # The provider is on another origin, which staff allow, and on loopback, whose network the
    # server allows (a campus provider on 10.x would be the same: docs/security.md).
    settings.OUTBOUND_PRIVATE_NETWORKS = ["127.0.0.0/8"]
    with ResourceMcpServer(issuer=oidc_provider.issuer, verify=oidc_provider.access_subject) as server:
        service = McpService.objects.create(
            name="grades", display_name="成绩", protocol="streamable-http", timeout_sec=10,
            config={"url": server.url, "oauth": {"client_id": CLIENT_ID, "client_secret": CLIENT_SECRET,
                                                 "scope": "openid offline_access"}},
            oauth_origins=[oidc_provider.issuer])
        agent_factory(mcp_services=[service])
        llm_settings.reply_tool_calls(("grades__connect_account", {}))
        llm_settings.reply_tool_calls(("grades__whoami", {}))
        llm_settings.reply_text("查到了。")
        with httpx.Client(base_url=live_asgi, timeout=20) as client:
            response = client.stream("POST", "/api/v1/chat", json={"message": "我的成绩"}, headers=auth_headers)
            opened = response.__enter__()
            try:
                blocks, raw = read_until(opened, lambda f: f["type"] == "authorization_required")
                asked = blocks[-1][1]
                assert asked["url"].startswith(f"{oidc_provider.issuer}/authorize?") and asked["service"] == "成绩"
                back = _page_answer(asked["url"])
                assert client.get(back.removeprefix(live_asgi), headers=auth_headers).status_code == 302
                rest = read_rest(opened)
            finally:
                response.__exit__(None, None, None)
    later, _ = parse_blocks(raw[raw.rfind("\n\n") + 2:] + rest)
    assert later[-1][1]["full_text"] == "查到了。"
    [authorize] = oidc_provider.authorize_requests
    assert authorize["code_challenge_method"] == "S256" and "openid" in authorize["scope"].split()
    assert [m.content for m in Message.objects.filter(role="tool")][-1] == oidc_provider.account.sub
    assert McpOAuthGrant.objects.filter(user=user, service=service).count() == 1


def test_a_hostile_service_cannot_steer_the_authorization_to_an_internal_address(
    live_asgi, llm_settings, agent_factory, user, auth_headers
):
    """A hostile MCP server's metadata names, as its authorization server, an internal address
    (another port of this machine, as 10.x or 169.254.169.254 would be): the gateway sends it
    nothing (no metadata fetched, no registration posted) and hands the student no page there;
    the call fails with a message for the student, and the log tells staff what was refused."""
    warnings: list[str] = []
    sink = logger.add(lambda m: warnings.append(m.record["message"]), level="WARNING", format="{message}")
    try:
        with OAuthMcpServer(required_scopes=("openid",)) as internal, \
                ResourceMcpServer(issuer=internal.issuer, verify=lambda token: None) as hostile:
            service = McpService.objects.create(name="grades", display_name="成绩", protocol="streamable-http",
                                                config={"url": hostile.url, "oauth": {}}, timeout_sec=10)
            agent_factory(mcp_services=[service])
            llm_settings.reply_tool_calls(("grades__connect_account", {}))
            llm_settings.reply_text("成绩暂时查不了。")
            with httpx.Client(base_url=live_asgi, timeout=20) as client:
                with client.stream("POST", "/api/v1/chat", json={"message": "我的成绩"},
                                   headers=auth_headers) as response:
                    blocks, _ = read_until(response, lambda f: f["type"] in ("done", "authorization_required"))
    finally:
        logger.remove(sink)
    assert internal.hits == [] and not McpOAuthPending.objects.exists()
    assert [f["type"] for _, f in blocks if f["type"] != "chunk"] == ["session", "tool_call", "tool_result", "done"]
    [result] = [f for _, f in blocks if f["type"] == "tool_result"]
    assert result["ok"] is False and result["error"] == OAUTH_REFUSED_NOTICE.format(service="成绩")
    assert llm_settings.requests[1].messages[-1]["content"] == OAUTH_REFUSED_REASON
    assert any(internal.issuer in line and "允许的授权服务器" in line for line in warnings)
