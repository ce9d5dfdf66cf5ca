"""CAS login (统一身份认证) in Chromium: the login page's button, the real CAS server's own form on
loopback (testkit/cas/), and back on the chat signed in; single logout from the CAS server ends
the page's session."""

import re

import pytest

from chat_app.models import CampusIdentity
from testkit.cas.server import ACCOUNT, PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_cas_login_through_the_campus_form_then_single_logout(browser_page, cas_settings):
    cas = cas_settings
    page = browser_page.page
    browser_page.goto("/")
    page.wait_for_url(re.compile(r"/login/"))
    assert page.text_content("#cas-login").strip() == "统一身份认证"

    page.click("#cas-login")
    page.wait_for_url(re.compile(re.escape(f"{cas.cas_url}login")))
    page.fill("#id_username", ACCOUNT)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    browser_page.chat_ready()
    assert page.url == f"{browser_page.base_url}/"
    assert CampusIdentity.objects.select_related("user").get(source="cas", sub=ACCOUNT).user.first_name == "林同学"

    # Signed out at the CAS server (the campus portal's logout): its logoutRequest ends our session.
    page.goto(f"{cas.cas_url}logout")
    browser_page.goto("/")
    page.wait_for_url(re.compile(r"/login/"))

    # The sign-in's redirects leave this origin on purpose: they are the only requests that do.
    browser_page.requests[:] = [url for url in browser_page.requests if not url.startswith(cas.url + "/")]
