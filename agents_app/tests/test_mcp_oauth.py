"""MCP services each student authorizes with their own account (agents_app/mcp/oauth.py), end to
end: the project's pool and tool call against an MCP server protected by its own OAuth 2.1
authorization server, both built with the mcp SDK (testkit/mcp/oauth_servers.py), on
loopback. The student at the authorization page is the conformance client's headless person
(the loopback server approves at once)."""
import asyncio
from contextlib import AsyncExitStack

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model

from agents_app.mcp.connect import mcp_client_enter
from agents_app.mcp.oauth import CampusOAuthProvider
from agents_app.mcp.person import person_use
from agents_app.mcp.pool import mcp_pool_close
from agents_app.mcp.tools import AUTHORIZATION_NOTICE, mcp_service_tool_infos, mcp_tool_call
from agents_app.models import McpOAuthClient, McpOAuthGrant, McpService
from agents_app.runtime.context import RunContext
from agents_app.runtime.events import AuthorizationRequired, Paused, ToolResult
from agents_app.runtime.loop import run_turn
from agents_app.validation import mcp_config_errors
from testkit.mcp.conformance_client import HeadlessPerson
from testkit.mcp.oauth_servers import OAuthMcpServer

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def oauth_server():
    with OAuthMcpServer() as server:
        yield server


@pytest.fixture(autouse=True)
async def _pool():
    yield
    await mcp_pool_close()


def _service(server: OAuthMcpServer, **oauth) -> McpService:
    return McpService.objects.create(name="library", display_name="图书馆", protocol="streamable-http",
                                     config={"url": server.url, "oauth": oauth}, timeout_sec=10)


@pytest.fixture
def library(oauth_server) -> McpService:
    return _service(oauth_server)


def _student(name: str) -> int:
    return get_user_model().objects.create_user(username=name).pk


async def _whoami(service: McpService, user_id: int | None):
    return await mcp_tool_call(service=service, tool="whoami", args={}, shown_as="library__whoami", user_id=user_id)


async def test_a_student_authorizes_once_and_the_tokens_are_kept_encrypted(oauth_server, library):
    alice = await sync_to_async(_student)("alice")
    with person_use(HeadlessPerson()):
        infos = await mcp_service_tool_infos(service=library, user_id=alice)
    assert {"whoami", "add"} <= {info.name for info in infos}
    assert (await _whoami(library, alice)).text == "alice"

    [asked] = oauth_server.authorize_requests
    assert asked["code_challenge_method"] == "S256" and asked["code_challenge"]
    assert asked["resource"] == oauth_server.url  # RFC 8707: the token is for this server only
    assert len(oauth_server.registrations) == 1  # dynamic registration, once for the service
    [(access_token, issued)] = oauth_server.tokens.items()
    assert issued["subject"] == "alice"
    grant = await McpOAuthGrant.objects.aget(user_id=alice, service=library)
    client = await McpOAuthClient.objects.aget(service=library)
    assert grant.scope == "library" and grant.expires_at is not None
    assert access_token not in grant.tokens_encrypted and "refresh" not in grant.tokens_encrypted
    assert oauth_server.registrations[0]["client_name"] not in client.client_info_encrypted

    await mcp_pool_close()  # as after a restart: a new session, nobody at hand to authorize
    assert (await _whoami(library, alice)).text == "alice"
    assert len(oauth_server.authorize_requests) == 1  # the stored token served


async def test_students_never_share_a_session_or_a_token(oauth_server, library):
    alice, bob = [await sync_to_async(_student)(name) for name in ("alice", "bob")]
    with person_use(HeadlessPerson()):
        assert (await _whoami(library, alice)).text == "alice"
    refused = await _whoami(library, bob)  # bob has authorized nothing, and nobody can for him
    assert not refused.ok and not refused.source_failed
    assert refused.error == AUTHORIZATION_NOTICE.format(service="图书馆")
    assert "授权" in refused.text
    assert len(oauth_server.authorize_requests) == 1  # no page opened for bob without him

    oauth_server.subject = "bob"
    with person_use(HeadlessPerson()):
        assert (await _whoami(library, bob)).text == "bob"
    assert (await _whoami(library, alice)).text == "alice"  # alice's session is still alice's
    assert await McpOAuthGrant.objects.filter(service=library).acount() == 2


async def test_a_call_without_a_student_is_refused_with_a_reason(oauth_server, library):
    refused = await _whoami(library, None)  # an API key's turn: no account to authorize with
    assert not refused.ok and refused.error == AUTHORIZATION_NOTICE.format(service="图书馆")
    assert oauth_server.authorize_requests == [] and oauth_server.token_requests == []


async def test_a_preregistered_client_authenticates_with_its_secret(oauth_server):
    with OAuthMcpServer(dcr=False, preregistered={"campus-agent": "s3cret"}) as server:
        service = await sync_to_async(_service)(server, client_id="campus-agent", client_secret="s3cret")
        alice = await sync_to_async(_student)("alice")
        with person_use(HeadlessPerson()):
            assert (await _whoami(service, alice)).text == "alice"
        assert server.registrations == []
        [exchange] = server.token_requests
        assert exchange["grant_type"] == "authorization_code" and exchange["authorization"].startswith("Basic ")
        assert not await McpOAuthClient.objects.filter(service=service).aexists()  # staff's, in the config


async def test_an_expiring_token_is_refreshed_once_for_sessions_racing(oauth_server, library):
    """Two sessions of one student (two workers) find the token expiring at once: one refreshes,
    the other takes the tokens it stored. The loopback server rotates refresh tokens and, like a
    real one, revokes the family when a refresh token is used twice: without the single flight
    the second session's refresh would fail and end both students' access."""
    alice = await sync_to_async(_student)("alice")
    with person_use(HeadlessPerson()):
        assert (await _whoami(library, alice)).text == "alice"
    await mcp_pool_close()
    # Expiring within the refresh margin: the next use refreshes first.
    await McpOAuthGrant.objects.filter(user_id=alice).aupdate(expires_at=(await McpOAuthGrant.objects.aget()).updated_at)

    async def session_whoami() -> str:
        async with AsyncExitStack() as stack:
            client = await mcp_client_enter(service=library, stack=stack, auth=CampusOAuthProvider(library, alice))
            result = await client.call_tool("whoami", {})
            return result.content[0].text

    assert await asyncio.gather(session_whoami(), session_whoami()) == ["alice", "alice"]
    refreshes = [r for r in oauth_server.token_requests if r["grant_type"] == "refresh_token"]
    assert len(refreshes) == 1
    assert len(oauth_server.authorize_requests) == 1  # nobody was sent to the page again


async def test_a_turn_calls_the_service_as_its_student(oauth_server, library, agent_factory, llm_settings):
    alice, bob = [await sync_to_async(_student)(name) for name in ("alice", "bob")]
    with person_use(HeadlessPerson()):
        assert (await _whoami(library, alice)).text == "alice"
    agent = await sync_to_async(agent_factory)(mcp_services=[library])

    async def turn(user_id: int) -> list:
        llm_settings.reply_tool_calls(("library__whoami", {}))
        llm_settings.reply_text("好的")
        ctx = RunContext(request_id="0123456789abcdef", conversation_id="conv-oauth", user_id=user_id)
        return [e async for e in run_turn(agent=agent, history=[{"role": "user", "content": "我是谁"}], ctx=ctx)]

    [result] = [e for e in await turn(alice) if isinstance(e, ToolResult)]
    assert result.content == "alice"
    # bob has not connected his account: his call is no failure, the turn waits for him.
    events = await turn(bob)
    assert [e for e in events if isinstance(e, ToolResult)] == []
    paused = events[-1]
    assert isinstance(paused, Paused)
    [waiting] = paused.waiting
    assert isinstance(waiting, AuthorizationRequired)
    assert (waiting.tool, waiting.service, waiting.service_id) == ("library__whoami", "图书馆", library.pk)
    assert waiting.url.startswith(f"{oauth_server.issuer}/authorize?") and "code_challenge_method=S256" in waiting.url


def test_the_oauth_config_is_checked():
    ok = {"url": "https://lib.example.edu.cn/mcp", "oauth": {}}
    assert mcp_config_errors(protocol="streamable-http", config=ok) == []
    assert mcp_config_errors(protocol="sse", config={**ok, "oauth": {"client_id": "a", "scope": "x y"}}) == []
    assert mcp_config_errors(protocol="streamable-http", config={**ok, "oauth": "yes"})
    assert mcp_config_errors(protocol="streamable-http", config={**ok, "oauth": {"client_secret": "s"}})
    assert mcp_config_errors(protocol="streamable-http", config={**ok, "oauth": {"client_id": 7}})
    [unknown] = mcp_config_errors(protocol="streamable-http", config={**ok, "oauth": {"token": "t"}})
    assert "token" in unknown
    assert mcp_config_errors(protocol="stdio", config={"command": "python", "oauth": {}})  # HTTP services only


def test_a_service_called_with_the_gateways_own_credential_is_one_session_for_all():
    """`"grant": "client_credentials"`: the SDK's client-credentials providers (the official
    conformance suite runs both against its authorization server: scripts/mcp-conformance.sh);
    no student, so one session for every turn."""
    from mcp.client.auth.extensions.client_credentials import (
        ClientCredentialsOAuthProvider,
        PrivateKeyJWTOAuthProvider,
    )

    from agents_app.mcp.oauth import oauth_required, session_auth
    from agents_app.mcp.pool import session_key

    url = "https://grades.example.edu.cn/mcp"
    secret = McpService(pk=5, protocol="streamable-http",
                        config={"url": url, "oauth": {"grant": "client_credentials", "client_id": "gw", "client_secret": "s",
                                                      "issuer": "https://sso.example.edu.cn"}})
    signed = McpService(pk=6, protocol="sse", config={"url": url, "oauth": {
        "grant": "client_credentials", "client_id": "gw", "private_key": "-----BEGIN PRIVATE KEY-----…",
        "signing_algorithm": "ES256", "issuer": "https://sso.example.edu.cn"}})
    for service in (secret, signed):
        assert not oauth_required(service)
        assert session_key(service, 1) == session_key(service, 2) == (service.pk, None)
    assert isinstance(session_auth(secret, 1), ClientCredentialsOAuthProvider)
    assert isinstance(session_auth(signed, None), PrivateKeyJWTOAuthProvider)
    assert session_auth(McpService(pk=7, protocol="streamable-http", config={"url": url}), 1) is None

    base = {"url": url}
    errors = mcp_config_errors
    assert errors(protocol="streamable-http", config=secret.config) == []
    assert errors(protocol="sse", config=signed.config) == []
    both = {"grant": "client_credentials", "client_id": "gw", "client_secret": "s", "private_key": "k"}
    assert errors(protocol="streamable-http", config={**base, "oauth": both})  # one of the two, not both
    assert errors(protocol="streamable-http", config={**base, "oauth": {"grant": "client_credentials", "client_id": "gw"}})
    assert errors(protocol="streamable-http", config={**base, "oauth": {"grant": "password"}})
    assert errors(protocol="streamable-http", config={**base, "oauth": {"private_key": "k"}})  # students have none
    assert errors(protocol="streamable-http", config={**base, "oauth": {**both, "client_secret": "", "signing_algorithm": "HS256"}})


async def test_staff_listing_a_per_student_service_is_told_why_until_a_student_connected(oauth_server, library):
    from agents_app.mcp.pool import McpUnavailable
    from agents_app.mcp.tools import PER_STUDENT_PROBE_TEXT, mcp_service_probe

    with pytest.raises(McpUnavailable) as refused:
        await mcp_service_probe(service=library)  # admin has no student's session to list with
    assert str(refused.value) == PER_STUDENT_PROBE_TEXT and oauth_server.authorize_requests == []
    alice = await sync_to_async(_student)("alice")
    with person_use(HeadlessPerson()):
        await mcp_service_tool_infos(service=library, user_id=alice)
    assert {"whoami", "add"} <= {info.name for info in await mcp_service_probe(service=library)}


def test_a_pending_authorization_without_a_scope_is_found_again(library):
    """The same page is handed out again while it is good (oauth.py `_authorization_hand_out`),
    also when the server names no scope: a JSON null in the stored flow matches None."""
    import datetime as dt

    from django.utils import timezone

    from agents_app.models import McpOAuthPending

    alice = _student("alice")
    McpOAuthPending.objects.create(state="s1", user_id=alice, service=library, verifier_encrypted="v", url="u1",
                                   flow={"scope": None}, expires_at=timezone.now() + dt.timedelta(minutes=5))
    McpOAuthPending.objects.create(state="s2", user_id=alice, service=library, verifier_encrypted="v", url="u2",
                                   flow={"scope": "library"}, expires_at=timezone.now() + dt.timedelta(minutes=5))
    assert [p.url for p in McpOAuthPending.objects.filter(flow__scope=None)] == ["u1"]
    assert [p.url for p in McpOAuthPending.objects.filter(flow__scope="library")] == ["u2"]


CIMD_URL = "https://gateway.example.edu.cn/mcp/oauth/client-metadata.json"


async def test_the_gateway_is_known_by_its_client_id_metadata_document(settings, async_client):
    """An authorization server that takes client ID metadata documents learns who the gateway is
    from the document it serves (`/mcp/oauth/client-metadata.json`): no registration. The SDK
    uses a document only at an https URL, which loopback cannot serve, so the server is handed
    the document the gateway served (OAuthMcpServer.client_metadata_documents)."""
    settings.MCP_OAUTH_CLIENT_METADATA_URL = CIMD_URL
    served = await async_client.get("/mcp/oauth/client-metadata.json")
    assert served.status_code == 200 and served["Cache-Control"] == "public, max-age=3600"
    document = served.json()
    assert document["client_id"] == CIMD_URL and document["redirect_uris"] == [settings.MCP_OAUTH_REDIRECT_URL]
    assert document["token_endpoint_auth_method"] == "none"
    with OAuthMcpServer(dcr=False, cimd=True) as server:
        server.client_metadata_documents[CIMD_URL] = document
        service = await sync_to_async(_service)(server)
        alice = await sync_to_async(_student)("alice")
        with person_use(HeadlessPerson()):
            assert (await _whoami(service, alice)).text == "alice"
        assert server.registrations == [] and server.authorize_requests[0]["client_id"] == CIMD_URL
    settings.MCP_OAUTH_CLIENT_METADATA_URL = ""
    assert (await async_client.get("/mcp/oauth/client-metadata.json")).status_code == 404


async def test_disconnecting_revokes_the_tokens_at_the_authorization_server(oauth_server, library):
    """RFC 7009: a student's 断开 (or staff deleting the row) revokes the refresh token, then the
    access token, as the gateway's client, at the endpoint the discovery found; then deletes them
    here. The next use asks the student again."""
    from chat_app.conversations.privacy import connected_account_remove

    alice = await sync_to_async(_student)("alice")
    with person_use(HeadlessPerson()):
        assert (await _whoami(library, alice)).text == "alice"
    grant = await McpOAuthGrant.objects.aget(user_id=alice, service=library)
    assert grant.revocation_endpoint == f"{oauth_server.issuer}/revoke"
    [access_token] = oauth_server.tokens
    [refresh_token] = oauth_server.refresh_tokens
    await mcp_pool_close()

    user = await sync_to_async(get_user_model().objects.get)(pk=alice)
    assert await sync_to_async(connected_account_remove)(user=user, grant_id=grant.id) is True
    assert [(r["token"], r["token_type_hint"]) for r in oauth_server.revocation_requests] == [
        (refresh_token, "refresh_token"), (access_token, "access_token")]
    assert access_token not in oauth_server.tokens and refresh_token not in oauth_server.refresh_tokens
    assert not await McpOAuthGrant.objects.filter(user_id=alice).aexists()
    again = await _whoami(library, alice)  # nobody at hand: the student must connect again
    assert not again.ok and again.error == AUTHORIZATION_NOTICE.format(service="图书馆")


async def test_a_revocation_endpoint_that_does_not_answer_does_not_keep_the_account(oauth_server, library):
    from chat_app.conversations.privacy import connected_account_remove

    alice = await sync_to_async(_student)("alice")
    with person_use(HeadlessPerson()):
        assert (await _whoami(library, alice)).text == "alice"
    await McpOAuthGrant.objects.filter(user_id=alice).aupdate(revocation_endpoint="http://127.0.0.1:9/revoke")
    grant = await McpOAuthGrant.objects.aget(user_id=alice)
    user = await sync_to_async(get_user_model().objects.get)(pk=alice)
    assert await sync_to_async(connected_account_remove)(user=user, grant_id=grant.id) is True
    assert not await McpOAuthGrant.objects.filter(user_id=alice).aexists()


def test_staff_deleting_a_connected_account_revokes_it_too(oauth_server, library, staff_client):
    from asgiref.sync import async_to_sync
    from django.urls import reverse

    alice = _student("alice")

    async def connect():
        with person_use(HeadlessPerson()):
            assert (await _whoami(library, alice)).text == "alice"
        await mcp_pool_close()

    async_to_sync(connect)()
    grant = McpOAuthGrant.objects.get(user_id=alice)
    delete = reverse("admin:agents_app_mcpoauthgrant_delete", args=[grant.pk])
    assert staff_client.post(delete, {"post": "yes"}).status_code == 302
    assert not McpOAuthGrant.objects.filter(pk=grant.pk).exists()
    assert [r["token_type_hint"] for r in oauth_server.revocation_requests] == ["refresh_token", "access_token"]
