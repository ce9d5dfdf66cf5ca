import pytest


@pytest.mark.django_db
def test_healthz_reports_database_ok(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "db": "ok"}
    assert len(response["X-Request-Id"]) == 16
