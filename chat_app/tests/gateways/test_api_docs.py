"""/api/v1/docs works offline: Swagger UI comes from our own static files, not a CDN."""
import re

import httpx
import pytest

pytestmark = pytest.mark.django_db(transaction=True)


def test_docs_page_loads_swagger_ui_from_same_origin_static_files(live_site):
    page = httpx.get(f"{live_site}/api/v1/docs", timeout=10)
    assert page.status_code == 200 and "swagger" in page.text.lower()
    # Every script, stylesheet and icon the page (and its init script) names.
    assets = re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)["']""", page.text)
    assets += re.findall(r"""["']([^"'\s]*swagger-ui[^"'\s]*\.(?:js|css))["']""", page.text)
    assert assets
    for url in assets:
        assert not re.match(r"^(?:[a-z]+:)?//", url, re.IGNORECASE), f"asset from another origin: {url}"
    static = sorted({u for u in assets if u.startswith("/static/")})
    assert any("swagger-ui-bundle" in u for u in static), static
    for url in static:
        response = httpx.get(f"{live_site}{url}", timeout=10)
        assert response.status_code == 200, url
        assert len(response.content) > 100, url
