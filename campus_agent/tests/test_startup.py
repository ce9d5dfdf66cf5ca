"""The run command's steps as an operator runs them: migrate a fresh SQLite file, then serve
campus_agent.asgi with uvicorn and with daphne."""
import re
import sqlite3
from pathlib import Path

import httpx
import pytest

from testkit.processes import asgi_server, manage, project_env


@pytest.fixture(scope="module")
def fresh_database(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("startup")
    env = project_env(tmp, DATABASE_URL=f"sqlite:///{tmp / 'fresh.sqlite3'}")
    done = manage("migrate", "--noinput", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return env, tmp / "fresh.sqlite3"


def test_migrate_builds_every_table_on_a_fresh_sqlite_file(fresh_database):
    _, path = fresh_database
    with sqlite3.connect(path) as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    expected = {"agents_app_agent", "agents_app_mcpservice", "subagents_app_subagent", "chat_app_conversation"}
    assert expected | {"chat_app_message", "auth_user", "django_session"} <= tables


def test_no_model_change_lacks_a_migration(fresh_database):
    env, _ = fresh_database
    done = manage("makemigrations", "--check", "--dry-run", env=env)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("kind", ["uvicorn", "daphne"])
def test_asgi_server_serves_healthz_and_admin_login(fresh_database, kind):
    env, _ = fresh_database
    rid = {"uvicorn": "00112233445566ff", "daphne": "aabbccddeeff0011"}[kind]
    with asgi_server(kind, env=env) as url:
        health = httpx.get(f"{url}/healthz", headers={"X-Request-Id": rid}, timeout=10)
        login = httpx.get(f"{url}/admin/login/", timeout=10)
        admin = httpx.get(f"{url}/admin/", timeout=10)

    assert (health.status_code, health.json()) == (200, {"status": "ok", "db": "ok"})
    assert health.headers["X-Request-Id"] == rid
    assert login.status_code == 200
    assert "校园小智" in login.text and 'name="password"' in login.text
    assert len(login.headers["X-Request-Id"]) == 16
    assert admin.status_code == 302 and admin.headers["Location"].startswith("/admin/login/")
    # The rotating file sink of LOG_DIR got the request's lines in the documented format.
    log = (Path(env["LOG_DIR"]) / "campus_agent.log").read_text(encoding="utf-8")
    line = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} \| INFO     \| request_id=%s \| campus_agent\.base\.request_id:\w+:\d+ - %s"
    assert re.search(line % (rid, "→ GET /healthz"), log), log
    assert re.search(line % (rid, r"← GET /healthz status=200 cost_ms=\d+\.\d"), log), log


def test_runserver_is_daphnes_and_no_other_command_loads_twisted(fresh_database):
    """`manage.py runserver` (scripts/run.sh) is daphne's ASGI server; every other process that
    loads the settings skips daphne's app, whose import installs Twisted's reactor."""
    env, _ = fresh_database
    runserver = manage("runserver", "--help", env=env, fresh=True)
    assert runserver.returncode == 0, runserver.stderr
    assert "--noasgi" in runserver.stdout  # an option of daphne's runserver only
    shell = manage("shell", "-c", "import sys, django.apps; print(sorted(m for m in sys.modules "
                   "if m.split('.')[0] in ('daphne', 'twisted')))", env=env, fresh=True)
    assert shell.returncode == 0, shell.stderr
    assert shell.stdout.strip().splitlines()[-1] == "[]"  # after the shell's "N objects imported"
