"""Routes of the server-rendered student page (/, a stored conversation, login, logout, the icon).
An unknown page address gets templates/404.html (campus_agent.base.errors.page_not_found)."""
from django.urls import path
from django.views.i18n import JavaScriptCatalog

from chat_app.gateways.page import views as pages
from chat_app.gateways.page.mcp_oauth import mcp_oauth_callback, mcp_oauth_client_metadata

urlpatterns = [
    path("", pages.chat_page, name="chat"),
    path("c/<uuid:conversation_id>/", pages.chat_page, name="chat-conversation"),
    path("login/", pages.LoginPage.as_view(), name="login"),
    path("language/", pages.language_set, name="language-set"),
    path("jsi18n/", JavaScriptCatalog.as_view(), name="javascript-catalog"),
    path("favicon.ico", pages.favicon, name="favicon"),
    path("login/campus/", pages.campus_login, name="campus-login"),
    path("login/campus/callback/", pages.campus_callback, name="campus-callback"),
    # CAS (统一身份认证): allow <site>/accounts/cas/login/ as the service at the CAS server.
    path("accounts/cas/login/", pages.cas_login, name="cas-login"),
    path("accounts/cas/logout/", pages.LogoutPage.as_view(), name="cas-logout"),
    # Django 5 logs out on POST only (a GET link could be forged by any page); the sidebar posts a form.
    path("logout/", pages.LogoutPage.as_view(), name="logout"),
    # An MCP service's authorization server sends the student back here (MCP_OAUTH_REDIRECT_URL).
    path("mcp/oauth/callback/", mcp_oauth_callback, name="mcp-oauth-callback"),
    # Who the gateway is to authorization servers that take client ID metadata documents
    # (serve it by setting MCP_OAUTH_CLIENT_METADATA_URL to <site>/mcp/oauth/client-metadata.json).
    path("mcp/oauth/client-metadata.json", mcp_oauth_client_metadata, name="mcp-oauth-client-metadata"),
]
