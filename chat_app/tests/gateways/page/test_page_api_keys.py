"""The 「API 密钥」 dialog on the chat page (docs/design.md#other-clients, issue 22), in headless Chromium: a key is
made, shown once with a copy button, listed by its first characters, works as a Bearer, and is
refused at once once revoked; keyboard and phone included."""
import httpx
import pytest

from chat_app.models import ApiKey
from testkit.web.page_helpers import VIEWPORT_IDS, VIEWPORTS, is_phone, no_sideways_scroll, sidebar_open, sized

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ROWS = """() => [...document.querySelectorAll('#api-keys-list tr')].map((tr) => ({
    name: tr.querySelector('.key-name').textContent,
    prefix: tr.querySelector('.key-prefix').textContent,
}))"""


@pytest.fixture
def chat(browser_page, user, password, agent, llm_settings):
    browser_page.sign_in(user)
    return browser_page


@pytest.mark.parametrize("viewport", VIEWPORTS, ids=VIEWPORT_IDS)
def test_a_key_is_made_shown_once_works_and_is_revoked(chat, live_site, user, viewport):
    page = sized(chat, viewport)
    sidebar_open(page)
    page.click("#api-keys-open")
    page.wait_for_selector("#api-keys[open]")
    page.wait_for_function("() => !document.getElementById('api-keys-empty').hidden")
    page.fill("#api-key-name", "Cherry Studio")
    page.select_option("#api-key-expiry", "90")
    page.press("#api-key-name", "Enter")
    page.wait_for_selector("#api-key-created:not([hidden])")
    secret = page.text_content("#api-key-secret")
    assert secret.startswith("cak_") and len(secret) == 36
    assert page.evaluate("() => document.activeElement.id") == "api-key-copy"
    page.wait_for_function("() => document.querySelectorAll('#api-keys-list tr').length === 1")
    rows = page.evaluate(ROWS)
    assert rows == [{"name": "Cherry Studio", "prefix": f"{secret[:10]}…"}]
    assert secret not in page.text_content("#api-keys-list")
    assert ApiKey.objects.get().expires_at is not None
    if not is_phone(page):
        assert no_sideways_scroll(page)
    chat.screenshot(f"api-keys-{VIEWPORT_IDS[VIEWPORTS.index(viewport)]}")

    answer = httpx.get(f"{live_site}/api/v1/conversations", headers={"Authorization": f"Bearer {secret}"})
    assert answer.status_code == 200

    page.keyboard.press("Escape")  # closes the dialog; the secret goes with it
    page.wait_for_selector("#api-keys:not([open])", state="attached")
    # The dialog's `close` event, which forgets the secret, is dispatched in a task after `open`
    # goes: wait for it rather than read at once.
    page.wait_for_function("() => document.getElementById('api-key-secret').textContent === ''")
    page.click("#api-keys-open")
    page.wait_for_function("() => document.querySelectorAll('#api-keys-list tr').length === 1")
    assert page.is_hidden("#api-key-created")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click(".key-revoke")
    page.wait_for_function("() => !document.getElementById('api-keys-empty').hidden")
    assert "已吊销" in page.text_content("#api-keys-status")
    answer = httpx.get(f"{live_site}/api/v1/conversations", headers={"Authorization": f"Bearer {secret}"})
    assert answer.status_code == 401


def test_a_name_is_asked_for(chat):
    page = chat.page
    sidebar_open(page)
    page.click("#api-keys-open")
    page.click("#api-key-create")
    page.wait_for_function("() => document.getElementById('api-keys-status').textContent === '请填写名称。'")
    assert ApiKey.objects.count() == 0
