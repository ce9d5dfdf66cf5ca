"""Fixtures of chat_app's API tests (the page's are in browser_fixtures.py)."""
import pytest
from django.contrib.auth import get_user_model

from chat_app.accounts.sessions import auth_session_create
from chat_app.models import AuthSession


@pytest.fixture
def other_user(db, password):
    return get_user_model().objects.create_user(username="20230002", password=password, first_name="小红")


@pytest.fixture
def token_for(db):
    """`token_for(user, campus_token="")` → a JWT naming a fresh AuthSession row."""

    def make(user, *, campus_token: str = "") -> str:
        via = AuthSession.Via.SSO if campus_token else AuthSession.Via.PASSWORD
        return auth_session_create(user=user, via=via, roles=["student"], campus_token=campus_token).access_token

    return make


@pytest.fixture
def user_token(user, token_for) -> str:
    return token_for(user)


@pytest.fixture
def auth_headers(user_token) -> dict:
    return {"Authorization": f"Bearer {user_token}"}


@pytest.fixture(scope="session")
def oidc_provider_session():
    """The campus OpenID Connect provider's server, started once per test session."""
    from testkit.identity.oidc_provider import OidcProvider

    with OidcProvider() as provider:
        yield provider


@pytest.fixture
def oidc_provider(oidc_provider_session):
    """A campus OpenID Connect provider on loopback (testkit/identity/oidc_provider.py): the
    session's one, reset for this test (no code, token, account change or record of another)."""
    oidc_provider_session.reset()
    yield oidc_provider_session
    oidc_provider_session.requests_cancel()


@pytest.fixture
def oidc_settings(settings, oidc_provider):
    """The OIDC_* settings pointing at `oidc_provider` (returned): campus login switched on."""
    from testkit.identity.oidc_provider import CLIENT_ID, CLIENT_SECRET

    settings.OIDC_ISSUER = oidc_provider.issuer
    settings.OIDC_CLIENT_ID = CLIENT_ID
    settings.OIDC_CLIENT_SECRET = CLIENT_SECRET
    return oidc_provider


@pytest.fixture(scope="session")
def cas_server_session(tmp_path_factory):
    """The loopback CAS server (django-cas-server in its own process, testkit/cas/), started once."""
    from testkit.cas.server import CasServer

    server = CasServer(tmp_path_factory.mktemp("cas-server")).start()
    yield server
    server.stop()


@pytest.fixture
def cas_server(cas_server_session):
    """The CAS server with its default account (testkit/cas/server.py: 2023010001, 本科生)."""
    cas_server_session.reset()
    return cas_server_session


@pytest.fixture
def cas_settings(settings, cas_server):
    """CAS_SERVER_URL pointing at `cas_server` (returned): CAS login switched on."""
    settings.CAS_SERVER_URL = cas_server.cas_url
    return cas_server
