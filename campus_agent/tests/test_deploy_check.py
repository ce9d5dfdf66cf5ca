"""The documented production settings (docs/production.env.example): `check --deploy` is clean with
them, and a server started with them redirects to HTTPS, sends HSTS and secure cookies behind a
proxy, and still answers load-balancer probes on /healthz over plain HTTP."""
import re
import secrets

import environ
import httpx
import pytest

from testkit.processes import BASE_DIR, asgi_server, manage, project_env

PRODUCTION_ENV = BASE_DIR / "docs" / "production.env.example"
HOST = "xiaozhi.example.edu.cn"


def _production_values() -> dict[str, str]:
    class Sandbox(environ.Env):
        ENVIRON: dict = {}  # read_env writes here instead of os.environ

    Sandbox.read_env(PRODUCTION_ENV, overwrite=True)  # how settings.py reads a .env
    return dict(Sandbox.ENVIRON)


def _production_env(tmp_path, **overrides: str) -> dict:
    values = _production_values()
    assert values["SECRET_KEY"] == ""  # the file publishes no key: the operator makes one
    values["SECRET_KEY"] = secrets.token_urlsafe(50)
    return project_env(tmp_path, **{**values, **overrides})


def test_check_deploy_is_clean_with_the_documented_production_env(tmp_path):
    done = manage("check", "--deploy", "--fail-level", "WARNING", env=_production_env(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "System check identified no issues (0 silenced)." in done.stdout


def test_check_deploy_warns_with_the_local_defaults(tmp_path):
    # The control: the local run's defaults are not production settings, and the check says so.
    env = project_env(tmp_path, SECRET_KEY=secrets.token_urlsafe(50), ALLOWED_HOSTS=HOST)
    done = manage("check", "--deploy", env=env)
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in done.stderr, warning


def test_production_env_names_only_variables_the_settings_read():
    source = (BASE_DIR / "campus_agent" / "settings.py").read_text(encoding="utf-8")
    read = set(re.findall(r"""env(?:\.\w+)?\(\s*["']([A-Z][A-Z0-9_]+)["']""", source))
    assert set(_production_values()) - read == set()  # a misspelt name would be silently ignored


@pytest.fixture
def production_server(tmp_path):
    # daphne without --proxy-headers: only SECURE_PROXY_SSL_HEADER tells Django a request came
    # over HTTPS (uvicorn would rewrite the scheme itself from a loopback X-Forwarded-Proto).
    env = _production_env(
        tmp_path,
        DATABASE_URL=f"sqlite:///{tmp_path / 'production.sqlite3'}",
        REDIS_URL="",
        DJANGO_SUPERUSER_PASSWORD="Prod-Admin-Pass-1",
    )
    for command in (("migrate", "--noinput"), ("createsuperuser", "--noinput", "--username", "ops", "--email", "o@x.cn")):
        done = manage(*command, env=env)
        assert done.returncode == 0, done.stderr
    with asgi_server("daphne", env=env) as url:
        yield url


def test_production_server_behind_nginx(production_server):
    plain = {"Host": HOST}
    tls = {"Host": HOST, "X-Forwarded-Proto": "https"}
    with httpx.Client(base_url=production_server, timeout=10) as client:
        redirected = client.get("/login/", headers=plain)
        assert redirected.status_code == 301
        assert redirected.headers["Location"] == f"https://{HOST}/login/"
        probe = client.get("/healthz", headers=plain)  # a load balancer's check, plain HTTP
        assert probe.status_code == 200 and probe.json()["status"] == "ok"

        page = client.get("/admin/login/", headers=tls)
        assert page.status_code == 200
        assert page.headers["Strict-Transport-Security"] == "max-age=31536000; includeSubDomains; preload"
        assert page.headers["Referrer-Policy"] == "same-origin"
        assert "secure" in page.headers["Set-Cookie"].lower()  # csrftoken
        csrf = page.cookies["csrftoken"]
        logged_in = client.post(  # the client reaches the server over http://: it holds back Secure cookies
            "/admin/login/?next=/admin/",
            data={"username": "ops", "password": "Prod-Admin-Pass-1", "csrfmiddlewaretoken": csrf},
            headers={**tls, "Cookie": f"csrftoken={csrf}", "Origin": f"https://{HOST}"},
        )
        assert logged_in.status_code == 302, logged_in.text[:300]
        session_cookie = next(c for c in logged_in.headers.get_list("Set-Cookie") if c.startswith("sessionid="))
        assert "; secure" in session_cookie.lower() and "httponly" in session_cookie.lower()
