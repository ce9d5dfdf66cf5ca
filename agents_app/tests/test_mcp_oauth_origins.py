"""Where an MCP service's OAuth requests may go (agents_app/mcp/oauth_origins.py,
docs/security.md#outbound-requests-oauth-discovery-and-private-addresses): a hostile MCP server
steering the discovery to an internal address, against the project's pool and tool call. The
hostile server and the "internal" service it points at are both OAuth-protected MCP servers built
with the mcp SDK (testkit/mcp/oauth_servers.py) on loopback; the internal one records every
request it gets (`hits`), which must stay empty."""

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from loguru import logger

from agents_app.mcp.oauth import grant_revoke
from agents_app.mcp.oauth_origins import McpOAuthRefused, oauth_url_check
from agents_app.mcp.person import person_use
from agents_app.mcp.pool import McpUnavailable, mcp_pool_close
from agents_app.mcp.tools import OAUTH_REFUSED_NOTICE, OAUTH_REFUSED_REASON, mcp_service_tool_infos, mcp_tool_call
from agents_app.models import McpOAuthGrant, McpOAuthPending, McpService
from agents_app.validation import oauth_origins_errors
from testkit.mcp.conformance_client import HeadlessPerson
from testkit.mcp.oauth_servers import OAuthMcpServer, ResourceMcpServer

PRM_PATH = "/.well-known/oauth-protected-resource/mcp"


@pytest.fixture(autouse=True)
async def _pool():
    yield
    await mcp_pool_close()


@pytest.fixture
def internal():
    """What the hostile server points at: a whole authorization server (metadata, registration,
    the authorization page) on another loopback port, as an internal service would be."""
    with OAuthMcpServer(required_scopes=("openid",)) as server:
        yield server


@pytest.fixture
def warnings_logged():
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(m.record["message"]), level="WARNING", format="{message}")
    yield lines
    logger.remove(sink)


def _service(url: str, oauth: dict | None = None, **fields) -> McpService:
    return McpService.objects.create(
        name="library",
        display_name="图书馆",
        protocol="streamable-http",
        config={"url": url, "oauth": {} if oauth is None else oauth},
        timeout_sec=10,
        **fields,
    )


def _student(name: str = "alice") -> int:
    return get_user_model().objects.create_user(username=name).pk


async def _whoami(service: McpService, user_id: int | None):
    return await mcp_tool_call(service=service, tool="whoami", args={}, shown_as="library__whoami", user_id=user_id)


@pytest.mark.django_db(transaction=True)
async def test_a_401_naming_resource_metadata_elsewhere_sends_nothing_there(internal, warnings_logged):
    with OAuthMcpServer() as hostile:
        hostile.resource_metadata_url = f"{internal.root_url}{PRM_PATH}"
        service = await sync_to_async(_service)(hostile.url)
        alice = await sync_to_async(_student)()
        with person_use(HeadlessPerson()):  # even with someone at hand to approve at once
            result = await _whoami(service, alice)
    assert internal.hits == []
    assert not result.ok and not result.source_failed
    assert result.error == OAUTH_REFUSED_NOTICE.format(service="图书馆")
    assert OAUTH_REFUSED_REASON in result.text and internal.root_url not in result.text
    assert any(hostile.resource_metadata_url in line and "允许的授权服务器" in line for line in warnings_logged)


@pytest.mark.django_db(transaction=True)
async def test_an_authorization_server_elsewhere_is_refused_until_staff_allow_it_and_its_network(
    settings, internal, warnings_logged
):
    """The server's own metadata names an authorization server on another origin (another port of
    this machine): no metadata fetched there, no registration posted, no page handed to the
    student. Listed by staff it is still an internal address; with its network allowed too
    (OUTBOUND_PRIVATE_NETWORKS, a campus whose sign-in is on 10.x) the student gets its page."""
    with ResourceMcpServer(issuer=internal.issuer, verify=lambda token: None) as hostile:
        service = await sync_to_async(_service)(hostile.url)
        alice = await sync_to_async(_student)()
        with pytest.raises(McpUnavailable) as refused:
            await mcp_service_tool_infos(service=service, user_id=alice)
        assert internal.hits == [] and not await McpOAuthPending.objects.aexists()
        assert refused.value.oauth_refused and refused.value.authorization_url is None

        service.oauth_origins = [internal.root_url]
        await service.asave()
        with pytest.raises(McpUnavailable) as internal_address:
            await mcp_service_tool_infos(service=service, user_id=alice)
        assert internal_address.value.oauth_refused and internal.hits == []
        assert any("127.0.0.1" in line and "OUTBOUND_PRIVATE_NETWORKS" in line for line in warnings_logged)

        settings.OUTBOUND_PRIVATE_NETWORKS = ["127.0.0.0/8"]
        await service.asave()  # a new fingerprint: the pool opens again at once
        with pytest.raises(McpUnavailable) as asked:
            await mcp_service_tool_infos(service=service, user_id=alice)
        assert asked.value.authorization_url.startswith(f"{internal.issuer}/authorize?")
        assert len(internal.registrations) == 1


@pytest.mark.django_db(transaction=True)
async def test_an_authorization_page_elsewhere_is_never_handed_to_the_student(internal):
    with OAuthMcpServer(metadata_changes={"authorization_endpoint": f"{internal.root_url}/authorize"}) as hostile:
        service = await sync_to_async(_service)(hostile.url)
        result = await _whoami(service, await sync_to_async(_student)())
    assert result.authorization_url is None and not await McpOAuthPending.objects.aexists()
    assert not result.ok and result.error == OAUTH_REFUSED_NOTICE.format(service="图书馆")
    assert internal.hits == []


@pytest.mark.django_db(transaction=True)
async def test_the_gateways_own_credential_is_never_sent_elsewhere(internal):
    with OAuthMcpServer() as hostile:
        hostile.resource_metadata_url = f"{internal.root_url}{PRM_PATH}"
        service = await sync_to_async(_service)(
            hostile.url, {"grant": "client_credentials", "client_id": "gateway", "client_secret": "s3cret"}
        )
        result = await _whoami(service, None)
    assert internal.hits == []
    assert not result.ok and result.error == OAUTH_REFUSED_NOTICE.format(service="图书馆")


@pytest.mark.django_db(transaction=True)
async def test_a_revocation_endpoint_elsewhere_is_not_sent_the_students_tokens(internal):
    with OAuthMcpServer() as library:
        service = await sync_to_async(_service)(library.url)
        alice = await sync_to_async(_student)()
        with person_use(HeadlessPerson()):
            assert (await _whoami(service, alice)).text == "alice"
    grant = await McpOAuthGrant.objects.select_related("service").aget(user_id=alice)
    grant.revocation_endpoint = f"{internal.root_url}/revoke"
    assert await sync_to_async(grant_revoke)(grant) is False
    assert internal.hits == []


def test_the_rule_origin_by_origin(settings):
    service = McpService(
        name="lib", config={"url": "http://127.0.0.1/mcp"}, oauth_origins=["https://idp.example.edu.cn"]
    )

    def refused(url: str) -> bool:
        try:
            oauth_url_check(service, url)
        except McpOAuthRefused:
            return True
        return False

    # Its own origin, whatever the address: staff chose it (the port written out or not).
    assert not refused("http://127.0.0.1:80/.well-known/oauth-authorization-server")
    assert refused("http://127.0.0.1:8080/register")  # another port is another origin
    assert refused("https://127.0.0.1/token")  # and another scheme
    assert not refused("https://IDP.example.edu.cn:443/token")  # listed (the origin, not the path)
    assert refused("https://idp.example.edu.cn:8443/token")
    for url in ("javascript:alert(1)", "file:///etc/passwd", "ftp://idp.example.edu.cn/", "http:///x", "//x"):
        assert refused(url)

    service.oauth_origins = ["*"]
    assert not refused("https://93.184.215.14/token")  # any public origin
    for url in (
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.5/",
        "http://[::1]:9000/",
        "http://[::ffff:127.0.0.1]:9000/",
        "http://0.0.0.0:9000/",
        "http://100.64.0.1/",
        "http://[fe80::1]/",
        "http://224.0.0.1/",
        "http://localhost:9000/",
    ):
        assert refused(url), url
    settings.OUTBOUND_PRIVATE_NETWORKS = ["10.0.0.0/8"]
    assert not refused("http://10.0.0.5/")
    assert refused("http://127.0.0.2/")


def test_the_allowed_origins_are_checked():
    assert oauth_origins_errors([]) == []
    assert oauth_origins_errors(["*"]) == []
    assert oauth_origins_errors(["https://idp.example.edu.cn", "http://10.0.0.5:8080/"]) == []
    assert oauth_origins_errors("https://idp.example.edu.cn")  # a list
    assert oauth_origins_errors(["https://idp.example.edu.cn"] * 21)
    for bad in (
        "https://idp.example.edu.cn/oauth",
        "idp.example.edu.cn",
        "ftp://idp.example.edu.cn",
        "https://user@idp.example.edu.cn",
        "https://idp.example.edu.cn?x=1",
        7,
        "https://" + "a" * 300,
    ):
        assert oauth_origins_errors([bad]), bad
