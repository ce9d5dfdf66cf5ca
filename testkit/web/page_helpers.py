"""Shared steps of the page's browser tests (issue 13): the two screen sizes and what a student does."""
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
VIEWPORTS = [DESKTOP, PHONE]
VIEWPORT_IDS = ["desktop", "phone"]

# The answer shown now in the last exchange (hidden earlier versions left out).
LAST_ANSWER = ".exchange:last-child .msg-assistant:not([hidden])"


def is_phone(page) -> bool:
    return page.viewport_size["width"] < 800


def sized(browser_page, viewport) -> object:
    page = browser_page.page
    page.set_viewport_size(viewport)
    return page


def ask(page, text: str) -> None:
    page.fill("#input", text)
    page.press("#input", "Enter")


def wait_answered(page, count: int | None = None) -> None:
    """Waits until no answer streams and the last exchange's answer is done (and, with `count`,
    until that many exchanges are on the pane)."""
    page.wait_for_function(
        """(count) => !document.getElementById('app').classList.contains('streaming')
            && document.querySelector('.exchange:last-child .msg-assistant:not([hidden]).done .msg-actions, .exchange:last-child .msg-assistant:not([hidden]).done .retry-row')
            && (count === null || document.querySelectorAll('.exchange').length === count)""",
        arg=count,
    )


def sidebar_open(page) -> None:
    """On a phone the list is a drawer behind ☰."""
    if is_phone(page) and page.get_attribute("#menu-toggle", "aria-expanded") != "true":
        page.click("#menu-toggle")
        page.wait_for_function("() => document.getElementById('sidebar').getBoundingClientRect().left >= 0")


def no_sideways_scroll(page) -> bool:
    return page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
