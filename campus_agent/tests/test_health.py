import httpx
import pytest

from testkit.processes import asgi_server, project_env


@pytest.mark.django_db
def test_healthz_reports_database_ok(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "db": "ok"}
    assert len(response["X-Request-Id"]) == 16


@pytest.mark.parametrize(
    "database_url",
    [
        # A file in a directory that does not exist: SQLite cannot open it.
        "sqlite:///{tmp}/missing-dir/db.sqlite3",
        # Nothing listens on port 1: PostgreSQL's connect is refused, as when the server is down.
        "postgres://postgres@127.0.0.1:1/campus_agent",
    ],
    ids=["sqlite", "postgresql"],
)
def test_healthz_answers_503_when_the_database_does_not(tmp_path, database_url):
    # A short pool timeout: with PostgreSQL down, a pooled connect waits that long, then fails.
    env = project_env(tmp_path, DATABASE_URL=database_url.format(tmp=tmp_path), DB_POOL_TIMEOUT="1")
    with asgi_server("uvicorn", env=env) as url:
        response = httpx.get(f"{url}/healthz", timeout=10)
        again = httpx.get(f"{url}/healthz", timeout=10)

    assert response.status_code == 503
    assert response.json() == {"status": "degraded", "db": "unavailable"}
    assert len(response.headers["X-Request-Id"]) == 16
    assert again.status_code == 503  # the failure does not poison the process


@pytest.mark.django_db(transaction=True)
def test_workers_answer_probes_without_the_middleware(live_asgi):
    """A worker answers /healthz from its ASGI entry point (campus_agent/health.py): a probe's
    Host is an address, not one of ALLOWED_HOSTS (Django's middleware would answer 400), and its
    request id comes back as on every other path."""
    probe = httpx.get(f"{live_asgi}/healthz", headers={"Host": "10.0.0.7:8000", "X-Request-Id": "lb-probe-0001"})
    assert probe.status_code == 200 and probe.json() == {"status": "ok", "db": "ok"}
    assert probe.headers["X-Request-Id"] == "lb-probe-0001" and probe.headers["Cache-Control"] == "no-store"
    head = httpx.head(f"{live_asgi}/healthz")
    assert head.status_code == 200 and head.content == b"" and len(head.headers["X-Request-Id"]) == 16
    # Only the probe's own path skips the middleware: anything else with that Host is refused.
    assert httpx.get(f"{live_asgi}/healthz/x", headers={"Host": "10.0.0.7:8000"}).status_code == 400
