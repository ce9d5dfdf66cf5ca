"""Browser fixtures: headless Chromium from Debian's `chromium` package driven by Playwright.

One browser per test session (starting Chromium is the slow part); a fresh context per test so
cookies never leak between tests. Every page records console errors, uncaught exceptions,
Content-Security-Policy violations and every request it makes; a test fails on any error or
violation, and on any request to another origin than the site's (the page must run clean under
its CSP, and model output must never make the browser fetch from elsewhere).

Playwright's sync API keeps its asyncio loop marked as running on the calling thread between
calls, and Django then refuses ORM calls on that thread (SynchronousOnlyOperation) — in fixtures
such as `user` and in the test's own checks of stored rows. So Playwright lives on a thread of
its own and tests drive it through `Remote` proxies; the main thread keeps a plain sync world
for the ORM, and the safety check stays on for the server (no DJANGO_ALLOW_ASYNC_UNSAFE).

Chromium missing is a failure, not a skip: CI installs the package, and a skipped browser suite
would hide a broken page.
"""
import os
import queue
import re
import subprocess
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from django.conf import settings

from campus_agent.testing.fixtures import project_served, project_server_reset

CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(settings.BASE_DIR) / "test-artifacts"
DEFAULT_TIMEOUT_MS = 8_000  # a step that takes longer is a failure, not something to wait out


class PlaywrightThread:
    """Runs callables one at a time on the thread that owns Playwright."""

    def __init__(self):
        self._calls: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._main, name="playwright", daemon=True)
        self._thread.start()

    def _main(self) -> None:
        while (item := self._calls.get()) is not None:
            fn, future = item
            try:
                future.set_result(fn())
            except BaseException as exc:  # noqa: BLE001 - handed to the caller, re-raised there
                future.set_exception(exc)

    def run(self, fn):
        if threading.current_thread() is self._thread:
            return fn()
        future: Future = Future()
        self._calls.put((fn, future))
        return future.result()

    def stop(self) -> None:
        self._calls.put(None)
        self._thread.join(timeout=10)


def _is_playwright(value) -> bool:
    return type(value).__module__.startswith("playwright.")


class Remote:
    """A Playwright object used from another thread: attribute reads and calls run on its thread."""

    __slots__ = ("_runner", "_target")

    def __init__(self, runner: PlaywrightThread, target):
        object.__setattr__(self, "_runner", runner)
        object.__setattr__(self, "_target", target)

    def _wrap(self, value):
        if _is_playwright(value):
            return Remote(self._runner, value)
        if isinstance(value, list):
            return [self._wrap(v) for v in value]
        return value

    def __getattr__(self, name):
        value = self._runner.run(lambda: getattr(self._target, name))
        if callable(value) and not _is_playwright(value):
            def call(*args, **kwargs):
                args = [a._target if isinstance(a, Remote) else a for a in args]
                return self._wrap(self._runner.run(lambda: value(*args, **kwargs)))

            return call
        return self._wrap(value)


@pytest.fixture(scope="session")
def browser():
    """One headless Chromium per test session, as a `Remote` (each test gets a context of its own)."""
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"Browser tests need Debian's chromium at {CHROMIUM} (apt-get install -y chromium), "
            "or CHROMIUM_PATH pointing at a Chromium binary.",
            pytrace=False,
        )
    from playwright.sync_api import sync_playwright

    runner = PlaywrightThread()
    manager = sync_playwright()
    try:
        playwright = runner.run(manager.__enter__)
        instance = runner.run(
            lambda: playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        )
        try:
            yield Remote(runner, instance)
        finally:
            runner.run(instance.close)
            runner.run(lambda: manager.__exit__(None, None, None))
    finally:
        runner.stop()


@pytest.fixture(scope="session")
def live_site_session(django_db_setup):
    """The page's server, started once per test session (`live_site` resets it after each test)."""
    from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

    with project_served(ASGIStaticFilesHandler) as server:
        yield server


@pytest.fixture
def live_site(transactional_db, live_site_session):
    """The project on uvicorn (like `live_asgi`) with /static/ served the way `runserver` does.

    Production puts static files behind nginx or the ASGI static handler; here the page needs
    its CSS, scripts and vendor libraries from the same origin without `collectstatic`.
    """
    yield live_site_session.url
    project_server_reset(live_site_session)


# Runs in every frame before the page's own scripts (Playwright injects it, so the page's CSP
# does not apply to it): each violation is reported to the test through an exposed function.
CSP_VIOLATION_LISTENER = """
document.addEventListener('securitypolicyviolation', (e) => window.__cspViolation(
    `event: ${e.effectiveDirective} blocked ${e.blockedURI || 'inline'} at ${e.sourceFile || e.documentURI}:${e.lineNumber}`));
"""
# DOMPurify parses the markup it cleans in an inert document, which in Chromium still answers to
# the page's policy: the inline styles and event handlers of hostile markup are reported there as
# blocked, though nothing would have run and the sanitizer drops them next. A test that feeds such
# markup (`hostile_markup = True`) accepts exactly these reports; any other violation (a blocked
# load, an inline <script>) still fails it.
SANITIZER_PARSE_REPORTS = (
    "event: style-src-attr blocked inline at ",
    "event: style-src-elem blocked inline at ",
    "event: script-src-attr blocked inline at ",
    "console: Applying inline style violates ",
    "console: Executing inline event handler violates ",
)
SANITIZER_SCRIPT = "/static/vendor/dompurify-"


@dataclass
class BrowserPage:
    """A Playwright page plus what went wrong in it."""

    page: object
    base_url: str
    errors: list[str] = field(default_factory=list)
    csp_violations: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    hostile_markup: bool = False  # the test feeds markup the sanitizer must clean (see above)

    def policy_breaks(self) -> list[str]:
        """CSP violations, less the sanitizer's own parse reports when the test feeds hostile markup."""
        return [
            v for v in self.csp_violations
            if not (self.hostile_markup and v.startswith(SANITIZER_PARSE_REPORTS) and SANITIZER_SCRIPT in v)
        ]

    def foreign_requests(self) -> list[str]:
        """Requests the page made (or tried to make) to any origin but the site's."""
        own = (self.base_url + "/", "data:", "blob:", "about:")
        return [url for url in self.requests if not url.startswith(own)]

    def goto(self, path: str):
        return self.page.goto(self.base_url + path)

    def screenshot(self, name: str) -> Path:
        ARTIFACTS.mkdir(exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=False)
        return path

    def sign_in(self, user) -> None:
        """Opens the chat page signed in as `user` without the login form: a session made on the
        server (Django's test client, `force_login`) whose cookie this context gets. For tests
        about the chat page; `login()` is the form a student fills in (and its tests use it)."""
        from django.test import Client

        client = Client()
        client.force_login(user)
        cookie = client.cookies[settings.SESSION_COOKIE_NAME]
        self.page.context.add_cookies([{"name": cookie.key, "value": cookie.value, "url": self.base_url}])
        self.goto("/")
        self.chat_ready()

    def login(self, *, username: str, password: str) -> None:
        self.goto("/")  # redirected to the login page: `/` requires login
        self.page.wait_for_url(re.compile(r"/login/"))
        self.page.fill("#id_username", username)
        self.page.fill("#id_password", password)
        self.page.click("button[type=submit]")
        self.chat_ready()

    def chat_ready(self) -> None:
        self.page.wait_for_selector("#app[data-ready=true]")


def cjk_font_installed() -> bool:
    """Whether this machine has a font for Chinese (scripts/test.sh installs fonts-noto-cjk): a
    test refreshes a committed screenshot in docs/ only then, never with boxes for Chinese."""
    try:
        found = subprocess.run(["fc-list", ":lang=zh", "family"], capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return bool(found.stdout.strip())


@pytest.fixture
def browser_page(browser, live_site):
    """A fresh desktop-sized page on `live_site`; fails the test on console errors."""
    context = browser.new_context(viewport={"width": 1280, "height": 860}, locale="zh-CN")
    context.set_default_timeout(DEFAULT_TIMEOUT_MS)
    page = context.new_page()
    wrapper = BrowserPage(page=page, base_url=live_site)
    context.expose_function("__cspViolation", lambda text: wrapper.csp_violations.append(text))
    context.add_init_script(CSP_VIOLATION_LISTENER)
    page.on("console", lambda msg: _console_record(wrapper, msg))
    page.on("pageerror", lambda exc: wrapper.errors.append(f"pageerror: {exc}"))
    page.on("request", lambda request: wrapper.requests.append(request.url))
    page.on("dialog", lambda dialog: dialog.accept())  # the delete confirmation
    try:
        yield wrapper
    finally:
        context.close()
    assert wrapper.policy_breaks() == [], "the page broke its Content-Security-Policy"
    assert wrapper.foreign_requests() == [], "the page fetched from another origin"
    assert wrapper.errors == [], "the page logged errors"


def _console_record(wrapper: BrowserPage, msg) -> None:
    # Chromium logs a blocked load or inline script as a console message of its own; a page
    # may also catch the event, so both are watched.
    if "Content Security Policy" in msg.text:
        wrapper.csp_violations.append(f"console: {msg.text} at {msg.location.get('url')}")
    elif msg.type == "error":
        wrapper.errors.append(f"console: {msg.text}")
