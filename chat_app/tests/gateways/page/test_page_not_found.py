"""A page that is not there, in Chromium (issue 42): a stale or foreign conversation link showed
Django's bare English "Not Found"; now the site's own page (its stylesheet, its icon, Chinese or
the reader's English) with a way back to the chat, under the CSP."""
import uuid

import pytest
from django.contrib.auth import get_user_model

from chat_app.models import Conversation

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

NOT_FOUND_LOGGED = "Failed to load resource: the server responded with a status of 404"


def _card_look(page) -> dict:
    return page.evaluate("""() => {
        const card = getComputedStyle(document.querySelector('main.auth-card'));
        const back = getComputedStyle(document.querySelector('#not-found-back'));
        return {card: card.backgroundColor, radius: card.borderRadius, back: back.backgroundColor,
                icon: document.querySelector('link[rel=icon]').href};
    }""")


def test_a_foreign_conversation_link_shows_the_sites_page_and_leads_back(browser_page, user, agent):
    stranger = get_user_model().objects.create_user(username="20239999", password="x")
    theirs = Conversation.objects.create(user=stranger, title="别人的对话")
    site = browser_page
    site.sign_in(user)
    page = site.page
    response = site.goto(f"/c/{theirs.id}/")
    assert response.status == 404
    assert page.title() == "找不到页面 · 校园小智" and page.text_content("h1") == "找不到这个页面"
    assert "别人的对话" not in page.content()
    look = _card_look(page)
    assert look["card"] == "rgb(255, 255, 255)" and look["radius"] == "16px"  # the site's card, styled
    assert look["back"] == "rgb(37, 99, 235)" and look["icon"].endswith("/static/img/logo.svg")
    site.screenshot("not-found")
    # The icon the browser would ask for at /favicon.ico is there too.
    assert page.request.get(site.base_url + "/favicon.ico").headers["content-type"] == "image/svg+xml"
    page.click("#not-found-back")
    site.chat_ready()
    assert page.url == site.base_url + "/"
    site.errors[:] = [e for e in site.errors if NOT_FOUND_LOGGED not in e]  # the 404 itself


def test_a_stale_link_reads_in_english_for_an_english_reader(browser, live_site, user, agent):
    from testkit.fixtures.browser import BrowserPage

    context = browser.new_context(viewport={"width": 390, "height": 844}, locale="en-US")
    try:
        site = BrowserPage(page=context.new_page(), base_url=live_site)
        site.sign_in(user)
        response = site.goto(f"/c/{uuid.uuid4()}/")
        page = site.page
        assert response.status == 404 and page.get_attribute("html", "lang") == "en"
        assert page.title() == "Page not found · Campus Assistant"
        assert page.text_content("#not-found-back") == "Back to the chat"
        # On a phone the card fits the screen.
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    finally:
        context.close()
