"""What the browser tests' screenshots show: the page's Chinese drawn with a CJK font, not as
boxes. Chromium picks a system font for each glyph; the test set-up installs Debian's
fonts-noto-cjk (scripts/test.sh), and Chromium's own record of the platform fonts it used for a
node (DevTools protocol, CSS.getPlatformFontsForNode) says which one drew it."""
import pytest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def platform_fonts(browser_page, selector: str) -> dict[str, int]:
    """Family name → how many glyphs of the first node matching `selector` it drew."""
    cdp = browser_page.page.context.new_cdp_session(browser_page.page)
    cdp.send("DOM.enable")
    cdp.send("CSS.enable")
    root = cdp.send("DOM.getDocument", {"depth": -1})["root"]["nodeId"]
    node = cdp.send("DOM.querySelector", {"nodeId": root, "selector": selector})["nodeId"]
    assert node, f"nothing matches {selector}"
    fonts = cdp.send("CSS.getPlatformFontsForNode", {"nodeId": node})["fonts"]
    return {font["familyName"]: font["glyphCount"] for font in fonts}


def test_chinese_on_the_login_and_chat_pages_is_drawn_with_a_cjk_font(browser_page, user, password):
    browser_page.goto("/login/")
    browser_page.page.wait_for_selector("#login-title")
    for selector in ("#login-title", ".brand span:not(.brand-mark)"):
        drawn = platform_fonts(browser_page, selector)
        assert drawn and all("CJK" in family for family in drawn), (selector, drawn)  # {"Noto Sans CJK SC": 2}
    browser_page.sign_in(user)
    drawn = platform_fonts(browser_page, "#chat-title")  # 新对话
    assert drawn and all("CJK" in family for family in drawn), drawn


FITS_IN_SIDEBAR = """() => {
    const side = document.querySelector('.sidebar').getBoundingClientRect();
    return [...document.querySelectorAll('.sidebar-bottom > *, .sidebar-bottom button')]
        .filter((n) => n.getBoundingClientRect().right > side.right + 0.5 || n.getBoundingClientRect().left < side.left)
        .map((n) => n.id || n.className);
}"""


def test_the_sidebars_buttons_fit_it_in_chinese(browser_page, user, password):
    """CJK glyphs are wider than the fallback's boxes: drawn in Noto Sans CJK, the name and the
    three buttons under the conversation list once ran past the sidebar's edge."""
    browser_page.sign_in(user)
    assert browser_page.page.evaluate(FITS_IN_SIDEBAR) == []
