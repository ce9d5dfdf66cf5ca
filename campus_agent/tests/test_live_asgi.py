import httpx
import pytest


@pytest.mark.django_db(transaction=True)
def test_live_asgi_serves_the_project(live_asgi):
    response = httpx.get(f"{live_asgi}/healthz", headers={"X-Request-Id": "0123456789abcdef"})
    assert response.status_code == 200
    assert response.json()["db"] == "ok"
    assert response.headers["X-Request-Id"] == "0123456789abcdef"
