"""campus_agent.middleware: Django's hooks run in the event loop under ASGI, not on a thread."""
import threading

import pytest
from django.conf import settings
from django.http import HttpResponse
from django.middleware.common import CommonMiddleware as DjangoCommonMiddleware
from django.test import RequestFactory

from campus_agent import middleware
from campus_agent.middleware import InlineHooks


def _recording(base):
    class Recording(base):
        threads: list[int]

        def process_request(self, request):
            self.threads.append(threading.get_ident())
            return super().process_request(request)

        def process_response(self, request, response):
            self.threads.append(threading.get_ident())
            return super().process_response(request, response)

    Recording.threads = []
    return Recording


async def _view(request):
    return HttpResponse("ok")


@pytest.mark.parametrize("inline", [True, False], ids=["ours", "django-control"])
async def test_hooks_run_on_the_event_loops_thread(inline, settings):
    settings.ALLOWED_HOSTS = ["testserver"]
    base = type("Ours", (InlineHooks, DjangoCommonMiddleware), {}) if inline else DjangoCommonMiddleware
    cls = _recording(base)
    response = await cls(_view)(RequestFactory().get("/x"))
    assert response.status_code == 200 and len(cls.threads) == 2
    on_loop = [ident == threading.get_ident() for ident in cls.threads]
    assert on_loop == ([True, True] if inline else [False, False])


def test_the_settings_use_them_and_keep_djangos_own_where_check_deploy_looks():
    ours = {f"campus_agent.middleware.{name}" for name in
            ("CSPMiddleware", "CommonMiddleware", "AuthenticationMiddleware", "MessageMiddleware")}
    assert ours <= set(settings.MIDDLEWARE)
    for name in ours:  # each is Django's class (the admin's checks look for subclasses)
        cls = getattr(middleware, name.rsplit(".", 1)[1])
        assert issubclass(cls, InlineHooks) and cls.__mro__[2].__module__.split(".")[0] in ("django", "csp")
    # `check --deploy` finds these by name (test_deploy_check.py runs it)
    assert {"django.middleware.security.SecurityMiddleware", "django.contrib.sessions.middleware.SessionMiddleware",
            "django.middleware.csrf.CsrfViewMiddleware",
            "django.middleware.clickjacking.XFrameOptionsMiddleware"} <= set(settings.MIDDLEWARE)
