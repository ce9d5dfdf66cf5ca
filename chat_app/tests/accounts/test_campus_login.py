"""Campus login on the page with OpenID Connect (issue 13), through the real project on uvicorn
and the loopback provider (testkit/identity/oidc_provider.py): real redirects, a real code
exchange with PKCE, the ID token checked, users linked by `sub`, the campus token kept in the
server-side session and sent to sub-agents, refreshed, revoked on logout."""
import json
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from django.contrib.auth import get_user_model

from chat_app.gateways.page.views import MSG_CAMPUS_LOGIN_FAILED
from chat_app.models import CampusIdentity

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def site(live_asgi):
    with httpx.Client(base_url=live_asgi, timeout=10) as client:
        yield client


def _campus_login(site, *, next_url: str = "/") -> httpx.Response:
    """The student's browser: /login/campus/ → the provider → back to the callback → next."""
    start = site.get("/login/campus/", params={"next": next_url})
    assert start.status_code == 302
    at_provider = httpx.get(start.headers["location"], timeout=10)  # the provider's own origin
    assert at_provider.status_code == 302
    return site.get(at_provider.headers["location"])


def _chat(site, message: str) -> str:
    site.get("/")  # the CSRF cookie
    response = site.post(
        "/api/v1/chat",
        json={"message": message},
        headers={"X-CSRFToken": site.cookies["csrftoken"], "Accept": "text/event-stream"},
    )
    assert response.status_code == 200, response.text
    return response.text


def test_login_with_pkce_links_the_campus_sub_and_keeps_the_token_server_side(site, oidc_settings):
    provider = oidc_settings
    start = site.get("/login/campus/", params={"next": "/c/7c1b3a2e-0000-4000-8000-000000000000/"})
    query = parse_qs(urlsplit(start.headers["location"]).query)
    assert start.headers["location"].startswith(f"{provider.issuer}/authorize?")
    assert query["code_challenge_method"] == ["S256"] and len(query["code_challenge"][0]) == 43
    assert query["client_id"] == ["campus-agent"] and "openid" in query["scope"][0].split()
    assert query["state"][0] and query["nonce"][0]

    at_provider = httpx.get(start.headers["location"], timeout=10)
    back = site.get(at_provider.headers["location"])
    assert back.status_code == 302 and back.headers["location"] == "/c/7c1b3a2e-0000-4000-8000-000000000000/"

    exchange = provider.token_requests[-1]
    assert exchange["grant_type"] == "authorization_code" and len(exchange["code_verifier"]) >= 43
    identity = CampusIdentity.objects.select_related("user").get(sub="2023010001")
    assert identity.user.first_name == "林同学" and identity.roles == ["student"]
    assert not identity.user.has_usable_password()
    page = site.get("/")
    assert page.status_code == 200 and "林同学" in page.text
    # The token is a credential: the browser holds only the session key, never the token.
    token = next(iter(provider.access))
    assert token not in page.text and all(token not in value for value in site.cookies.values())


def test_a_campus_sub_logs_in_as_the_user_sso_linked(site, oidc_settings, user):
    CampusIdentity.objects.create(sub="2023010001", user=user)
    assert _campus_login(site).status_code == 302
    assert get_user_model().objects.count() == 1
    assert "小明" in site.get("/").text or user.username in site.get("/").text


def test_sub_agents_receive_the_campus_token_refreshed_before_it_expires(
    site, oidc_settings, agent, llm_settings, subagent_server
):
    provider = oidc_settings
    provider.access_ttl = 10  # below the refresh margin: every turn refreshes first
    _campus_login(site)
    first_token = next(iter(provider.access))

    llm_settings.reply_tool_calls(("call_canteen", {"message": "今日菜单"}))
    llm_settings.reply_text("好的。")
    _chat(site, "今天吃什么")
    sent = subagent_server.requests[-1].headers["authorization"]
    assert provider.token_requests[-1]["grant_type"] == "refresh_token"
    assert sent.startswith("Bearer ") and sent != f"Bearer {first_token}"
    assert provider.access_token_valid(sent[7:])  # the fresh one

    # The rotated refresh token was kept: the next turn refreshes again.
    llm_settings.reply_tool_calls(("call_canteen", {"message": "明日菜单"}))
    llm_settings.reply_text("好的。")
    _chat(site, "明天吃什么")
    assert [r["grant_type"] for r in provider.token_requests].count("refresh_token") == 2
    assert provider.access_token_valid(subagent_server.requests[-1].headers["authorization"][7:])
    # It goes to sub-agents only, never to the model (docs/design.md#cross-cutting-rules).
    seen_by_model = json.dumps([r.messages for r in llm_settings.requests], ensure_ascii=False)
    assert not [token for token in provider.access if token in seen_by_model]


def test_logout_revokes_the_campus_tokens(site, oidc_settings):
    provider = oidc_settings
    _campus_login(site)
    access, refresh = next(iter(provider.access)), next(iter(provider.refresh))
    site.get("/")
    out = site.post("/logout/", headers={"X-CSRFToken": site.cookies["csrftoken"]})
    assert out.status_code == 302
    assert set(provider.revoked) == {access, refresh}
    assert site.get("/").status_code == 302  # logged out


@pytest.mark.parametrize(
    "spoil",
    [
        pytest.param(lambda flow: flow.update(state="forged"), id="state"),
        pytest.param(lambda flow: flow.update(code="made-up"), id="code"),
    ],
)
def test_a_forged_state_or_code_logs_no_one_in(site, oidc_settings, spoil):
    start = site.get("/login/campus/")
    callback = urlsplit(httpx.get(start.headers["location"], timeout=10).headers["location"])
    flow = {k: v[0] for k, v in parse_qs(callback.query).items()}
    spoil(flow)
    refused = site.get(callback.path, params=flow)
    assert refused.status_code == 400 and MSG_CAMPUS_LOGIN_FAILED in refused.text
    assert site.get("/").status_code == 302
    assert not CampusIdentity.objects.exists()


@pytest.mark.parametrize(
    "claims",
    [{"nonce": "replayed"}, {"aud": "another-client"}, {"iss": "http://127.0.0.1:9"}, {"exp": 1000}],
    ids=["nonce", "aud", "iss", "expired"],
)
def test_an_id_token_that_does_not_check_out_logs_no_one_in(site, oidc_settings, claims):
    oidc_settings.id_token_overrides = claims
    refused = _campus_login(site)
    assert refused.status_code == 400 and MSG_CAMPUS_LOGIN_FAILED in refused.text
    assert not CampusIdentity.objects.exists()


def test_a_code_is_used_once_and_a_declined_login_says_so(site, oidc_settings):
    start = site.get("/login/campus/")
    callback = httpx.get(start.headers["location"], timeout=10).headers["location"]
    assert site.get(callback).status_code == 302
    site.cookies.clear()
    assert site.get(callback).status_code == 400  # no flow in this session, and the code is spent
    declined = site.get("/login/campus/callback/", params={"error": "access_denied", "state": "x"})
    assert declined.status_code == 400 and MSG_CAMPUS_LOGIN_FAILED in declined.text


def test_the_provider_down_is_a_clear_page_not_a_500(site, settings):
    settings.OIDC_ISSUER, settings.OIDC_CLIENT_ID = "http://127.0.0.1:9", "campus-agent"
    refused = site.get("/login/campus/")
    assert refused.status_code == 502 and "校园统一身份认证暂时不可用" in refused.text


def test_without_oidc_settings_there_is_no_campus_login(site):
    assert site.get("/login/campus/").status_code == 404
    assert 'id="campus-login"' not in site.get("/login/").text


def test_the_login_page_offers_the_campus_login_first(site, oidc_settings):
    page = site.get("/login/", params={"next": "/c/x/"}).text
    assert 'id="campus-login"' in page and "/login/campus/?next=/c/x/" in page and "用校园账号登录" in page
    assert 'id="id_password"' in page  # the password form stays for staff and the demo



# --- issue 20 point 9: audiences and the sub ------------------------------------------------------


@pytest.mark.parametrize(
    "claims",
    [{"aud": ["campus-agent", "evil"]}, {"aud": ["campus-agent", "evil"], "azp": "evil"}, {"azp": "evil"}],
    ids=["several-audiences-no-azp", "several-audiences-azp-of-another", "azp-of-another"],
)
def test_a_token_issued_to_another_client_logs_no_one_in(site, oidc_settings, claims):
    """OIDC Core 3.1.3.7: with several audiences `azp` must be present and be our client id."""
    claims = {k: [oidc_settings.client_id if a == "campus-agent" else a for a in v] if k == "aud" else v
              for k, v in claims.items()}
    oidc_settings.id_token_overrides = claims
    refused = _campus_login(site)
    assert refused.status_code == 400 and MSG_CAMPUS_LOGIN_FAILED in refused.text
    assert not CampusIdentity.objects.exists()


def test_several_audiences_with_our_azp_log_in(site, oidc_settings):
    oidc_settings.id_token_overrides = {"aud": [oidc_settings.client_id, "other"], "azp": oidc_settings.client_id}
    assert _campus_login(site).status_code == 302
    assert CampusIdentity.objects.count() == 1


@pytest.mark.parametrize("sub", ["2023\n0001\x00", "2023\u202e1000", "x" * 151, "a\rb"],
                         ids=["newline-nul", "bidi-override", "151-chars", "cr"])
def test_a_sub_that_cannot_be_a_username_is_a_clear_page(site, oidc_settings, sub):
    from chat_app.accounts.oidc import MSG_SUB_UNUSABLE

    oidc_settings.account.sub = sub  # the ID token and the user-info answer agree on it
    refused = _campus_login(site)
    assert refused.status_code == 400
    assert str(MSG_SUB_UNUSABLE) in refused.text
    assert not CampusIdentity.objects.exists()
    assert not get_user_model().objects.filter(username__contains="2023").exists()
