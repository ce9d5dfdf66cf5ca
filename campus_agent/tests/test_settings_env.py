"""Settings come from the environment: each case imports campus_agent.settings in a fresh
interpreter with the variables set, as a deployment would."""
import json
import re
import subprocess
import sys

import environ
import pytest

from testkit.processes import BASE_DIR, project_env

DUMP = """
import json
from campus_agent import settings as s
db = s.DATABASES["default"]
print(json.dumps({
    "db": {k: db.get(k) for k in ("ENGINE", "NAME", "USER", "PASSWORD", "HOST", "PORT", "CONN_MAX_AGE", "OPTIONS")},
    "channels": s.CHANNEL_LAYERS["default"]["BACKEND"],
    "redis_hosts": s.CHANNEL_LAYERS["default"].get("CONFIG", {}).get("hosts"),
    "cache": getattr(s, "CACHES", {}).get("default"),
    "values": {k: getattr(s, k) for k in KEYS},
    "LOG_DIR": str(s.LOG_DIR),
}, default=str))
"""
PLAIN_KEYS = [
    "SECRET_KEY", "DEBUG", "ALLOWED_HOSTS", "CSRF_TRUSTED_ORIGINS", "TIME_ZONE", "LLM_BASE_URL", "LLM_API_KEY",
    "LLM_MODEL", "LLM_TIMEOUT", "LLM_MAX_TOKENS", "MAX_HISTORY", "MAX_TOOL_ROUNDS", "TURN_BUDGET_SEC", "SSE_PING_SEC",
    "CHAT_MAX_CONCURRENT_STREAMS", "CHAT_RATE_PER_MINUTE", "KEYWORD_FALLBACK_ENABLED", "JWT_TTL_HOURS", "JWT_ISSUER",
    "CAMPUS_SSO_USERINFO_URL", "LOG_LEVEL", "REDIS_URL", "SECURE_SSL_REDIRECT", "SECURE_REDIRECT_EXEMPT",
    "SECURE_HSTS_SECONDS", "SECURE_HSTS_INCLUDE_SUBDOMAINS", "SECURE_HSTS_PRELOAD", "SESSION_COOKIE_SECURE",
    "CSRF_COOKIE_SECURE", "SECURE_REFERRER_POLICY", "SECURE_PROXY_SSL_HEADER", "LOGIN_MAX_FAILURES_PER_USERNAME",
    "LOGIN_MAX_FAILURES_PER_IP", "LOGIN_FAILURE_WINDOW_SEC",
]  # fmt: skip


def settings_with(tmp_path, **env: str) -> dict:
    environment = {k: v for k, v in project_env(tmp_path).items() if k != "LOG_DIR"}
    environment.update(env, PYTHONPATH=str(BASE_DIR))  # cwd is elsewhere on purpose
    code = f"KEYS = {PLAIN_KEYS!r}\n{DUMP}"
    done = subprocess.run(  # noqa: PLW1510 (the return code is asserted)
        [sys.executable, "-c", code], cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def no_dotenv():
    if (BASE_DIR / ".env").exists():
        pytest.skip("a local .env sets values these defaults would be compared against")


def test_database_url_selects_postgresql_with_psycopg_and_short_connections(tmp_path):
    got = settings_with(tmp_path, DATABASE_URL="postgres://campus:pa%40ss@db.internal:5433/campus_agent")
    assert got["db"] == {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "campus_agent",
        "USER": "campus",
        "PASSWORD": "pa@ss",
        "HOST": "db.internal",
        "PORT": 5433,
        "CONN_MAX_AGE": 0,  # never a long max-age under ASGI
        # psycopg's pool instead of a connect per request; no SQLite-only options
        "OPTIONS": {"pool": {"min_size": 2, "max_size": 20, "timeout": 5.0}},
    }


def test_default_database_is_the_project_sqlite_file_wherever_it_runs(tmp_path, no_dotenv):
    got = settings_with(tmp_path)  # cwd is tmp_path, not the project
    assert got["db"]["ENGINE"] == "django.db.backends.sqlite3"
    assert got["db"]["NAME"] == str(BASE_DIR / "db.sqlite3")
    assert got["db"]["CONN_MAX_AGE"] == 0
    assert got["db"]["OPTIONS"]["timeout"] == 20
    assert got["LOG_DIR"] == str(BASE_DIR / "logs")


def test_relative_sqlite_and_log_paths_are_inside_the_project(tmp_path):
    got = settings_with(tmp_path, DATABASE_URL="sqlite:///var/campus.sqlite3", LOG_DIR="var/logs")
    assert got["db"]["NAME"] == str(BASE_DIR / "var" / "campus.sqlite3")
    assert got["LOG_DIR"] == str(BASE_DIR / "var" / "logs")
    absolute = settings_with(tmp_path, DATABASE_URL=f"sqlite:///{tmp_path}/x.sqlite3", LOG_DIR=str(tmp_path))
    assert (absolute["db"]["NAME"], absolute["LOG_DIR"]) == (f"{tmp_path}/x.sqlite3", str(tmp_path))


def test_redis_url_switches_the_channel_layer_and_the_cache(tmp_path):
    alone = settings_with(tmp_path)
    assert alone["channels"] == "channels.layers.InMemoryChannelLayer"
    # One process's own cache, sized for a campus (Django's default keeps 300 entries).
    assert alone["cache"] == {"BACKEND": "campus_agent.base.local_cache.LocalCache", "OPTIONS": {"MAX_ENTRIES": 100_000}}
    assert settings_with(tmp_path, LOCAL_CACHE_MAX_ENTRIES="5000")["cache"]["OPTIONS"] == {"MAX_ENTRIES": 5000}
    got = settings_with(tmp_path, REDIS_URL="redis://127.0.0.1:6379/2")
    assert got["channels"] == "channels_redis.core.RedisChannelLayer"
    assert got["redis_hosts"] == ["redis://127.0.0.1:6379/2"]
    # Shared by every worker: the per-user chat limits count there.
    assert got["cache"] == {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": "redis://127.0.0.1:6379/2"}


def test_typed_values_are_parsed_from_text(tmp_path):
    got = settings_with(
        tmp_path,
        DEBUG="true",
        ALLOWED_HOSTS="xiaozhi.example.edu.cn,10.0.0.5",
        LLM_MODEL="qwen-max",
        LLM_TIMEOUT="12.5",
        MAX_HISTORY="8",
        KEYWORD_FALLBACK_ENABLED="false",
        CAMPUS_SSO_USERINFO_URL="https://sso.example.edu.cn/userinfo",
    )["values"]
    assert got["DEBUG"] is True
    assert got["ALLOWED_HOSTS"] == ["xiaozhi.example.edu.cn", "10.0.0.5"]
    assert (got["LLM_MODEL"], got["LLM_TIMEOUT"], got["MAX_HISTORY"]) == ("qwen-max", 12.5, 8)
    assert got["KEYWORD_FALLBACK_ENABLED"] is False
    assert got["CAMPUS_SSO_USERINFO_URL"] == "https://sso.example.edu.cn/userinfo"


def test_env_example_documents_every_variable_settings_read():
    source = (BASE_DIR / "campus_agent" / "settings.py").read_text(encoding="utf-8")
    read = set(re.findall(r"""env(?:\.\w+)?\(\s*["']([A-Z][A-Z0-9_]+)["']""", source))
    example = (BASE_DIR / ".env.example").read_text(encoding="utf-8")
    documented = set(re.findall(r"^([A-Z][A-Z0-9_]+)=", example, flags=re.MULTILINE))
    design = {
        "SECRET_KEY", "DEBUG", "ALLOWED_HOSTS", "DATABASE_URL", "LLM_BASE_URL", "LLM_API_KEY", "LLM_MODEL",
        "LLM_TIMEOUT", "JWT_TTL_HOURS", "CAMPUS_SSO_USERINFO_URL", "LOG_LEVEL", "LOG_DIR", "REDIS_URL",
    }  # fmt: skip
    assert design <= read
    assert read - documented == set()


def test_env_example_copied_to_dot_env_gives_the_defaults(tmp_path, no_dotenv):
    # What a new user does: `cp .env.example .env`. Every value must parse and equal the
    # default (a comment after a value would become part of it).
    class Sandbox(environ.Env):
        ENVIRON: dict = {}  # read_env writes here instead of os.environ

    Sandbox.read_env(BASE_DIR / ".env.example", overwrite=True)  # the call settings.py makes
    values = Sandbox.ENVIRON
    assert "SECRET_KEY" in values and "LOG_DIR" in values
    defaults = settings_with(tmp_path)
    from_example = settings_with(tmp_path, **values)
    assert from_example == defaults


def _import_settings(tmp_path, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in project_env(tmp_path).items() if k != "LOG_DIR"}
    environment.update(env, PYTHONPATH=str(BASE_DIR))
    return subprocess.run(  # noqa: PLW1510 (the return code is asserted)
        [sys.executable, "-c", "import campus_agent.settings"], cwd=tmp_path, env=environment,
        capture_output=True, text=True, timeout=60,
    )


def test_development_secret_key_refused_when_served_to_other_machines(tmp_path, no_dotenv):
    done = _import_settings(tmp_path, ALLOWED_HOSTS="xiaozhi.example.edu.cn,127.0.0.1")
    assert done.returncode != 0
    assert "ImproperlyConfigured" in done.stderr and "SECRET_KEY" in done.stderr
    assert "xiaozhi.example.edu.cn" in done.stderr
    # The same hosts run with a key of their own, or with DEBUG on (a developer's machine).
    assert _import_settings(tmp_path, ALLOWED_HOSTS="xiaozhi.example.edu.cn", SECRET_KEY="k" * 50).returncode == 0
    assert _import_settings(tmp_path, ALLOWED_HOSTS="xiaozhi.example.edu.cn", DEBUG="true").returncode == 0


def test_development_secret_key_allowed_on_the_local_defaults(tmp_path, no_dotenv):
    # The README's run command: no SECRET_KEY, DEBUG off, ALLOWED_HOSTS defaulting to loopback.
    got = settings_with(tmp_path)["values"]
    assert got["DEBUG"] is False and got["SECRET_KEY"].startswith("dev-insecure-")
    assert _import_settings(tmp_path, ALLOWED_HOSTS="localhost,[::1]").returncode == 0


def test_https_settings_default_to_the_local_http_run_and_are_switched_on_by_the_environment(tmp_path, no_dotenv):
    local = settings_with(tmp_path)["values"]
    assert local["SECURE_SSL_REDIRECT"] is False and local["SECURE_HSTS_SECONDS"] == 0
    assert local["SESSION_COOKIE_SECURE"] is False and local["CSRF_COOKIE_SECURE"] is False
    assert local["SECURE_PROXY_SSL_HEADER"] is None
    assert local["SECURE_REDIRECT_EXEMPT"] == ["^healthz$"]  # probes over plain HTTP, also in production
    got = settings_with(
        tmp_path,
        SECURE_SSL_REDIRECT="true",
        SECURE_HSTS_SECONDS="31536000",
        SECURE_HSTS_INCLUDE_SUBDOMAINS="true",
        SECURE_HSTS_PRELOAD="true",
        SESSION_COOKIE_SECURE="true",
        CSRF_COOKIE_SECURE="true",
        SECURE_REFERRER_POLICY="strict-origin-when-cross-origin",
        SECURE_PROXY_SSL_HEADER="HTTP_X_FORWARDED_PROTO,https",
        LOGIN_MAX_FAILURES_PER_USERNAME="3",
        LOGIN_MAX_FAILURES_PER_IP="50",
        LOGIN_FAILURE_WINDOW_SEC="600",
    )["values"]
    assert got["SECURE_SSL_REDIRECT"] is True and got["SECURE_HSTS_SECONDS"] == 31536000
    assert got["SECURE_HSTS_INCLUDE_SUBDOMAINS"] is True and got["SECURE_HSTS_PRELOAD"] is True
    assert got["SESSION_COOKIE_SECURE"] is True and got["CSRF_COOKIE_SECURE"] is True
    assert got["SECURE_REFERRER_POLICY"] == "strict-origin-when-cross-origin"
    assert got["SECURE_PROXY_SSL_HEADER"] == ["HTTP_X_FORWARDED_PROTO", "https"]  # a tuple, through JSON
    assert (got["LOGIN_MAX_FAILURES_PER_USERNAME"], got["LOGIN_MAX_FAILURES_PER_IP"]) == (3, 50)
    assert got["LOGIN_FAILURE_WINDOW_SEC"] == 600


def test_a_malformed_proxy_ssl_header_is_refused_at_start(tmp_path):
    done = _import_settings(tmp_path, SECURE_PROXY_SSL_HEADER="HTTP_X_FORWARDED_PROTO")
    assert done.returncode != 0 and "SECURE_PROXY_SSL_HEADER" in done.stderr
