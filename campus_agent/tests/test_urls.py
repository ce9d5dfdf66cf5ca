"""The project's URLconf: every route is reachable.

Django tries patterns in order and stops at the first match, so a second pattern with the same
route is never reached (the OpenAPI document once relied on that: issue 19).
"""
import re
from collections import Counter

from django.urls import URLPattern, URLResolver, get_resolver, include, path, re_path
from django.urls.resolvers import RoutePattern

_PARAMETER = re.compile(r"<(?:(?P<converter>[^>:]+):)?\w+>")


def _route(pattern) -> str:
    # `<uuid:run_id>` and `<uuid:id>` match the same paths: only the converter counts.
    return _PARAMETER.sub(lambda m: f"<{m['converter'] or 'str'}>", str(pattern.pattern))


def routes(resolver: URLResolver, prefix: str = "") -> list[str]:
    """Every URLPattern's full route (its includes' routes in front), in the order Django tries them."""
    found = []
    for pattern in resolver.url_patterns:
        if isinstance(pattern, URLResolver):
            found += routes(pattern, prefix + _route(pattern))
        elif isinstance(pattern, URLPattern):
            found.append(prefix + _route(pattern))
    return found


def test_the_route_reader_sees_includes_and_ignores_parameter_names():
    def view(request):  # pragma: no cover - never called
        raise AssertionError

    resolver = URLResolver(RoutePattern(""), [
        path("a/<int:x>", view),
        path("api/", include([path("b/<uuid:run_id>", view), re_path(r"^c/$", view), path("b/<uuid:id>", view)])),
    ])
    assert routes(resolver) == ["a/<int>", "api/b/<uuid>", "api/^c/$", "api/b/<uuid>"]


def test_no_two_url_patterns_have_the_same_route():
    found = routes(get_resolver())
    assert "api/v1/chat" in found and "api/v1/runs/<uuid>/events" in found  # it really is the project's
    shadowed = sorted(route for route, count in Counter(found).items() if count > 1)
    assert shadowed == [], f"routes matched by an earlier pattern, never reached: {shadowed}"
