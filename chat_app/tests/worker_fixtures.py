"""Fixtures of the tests of several workers (test_runs_workers.py, test_approvals_workers.py),
registered in the root conftest.py.

Workers are `uvicorn campus_agent.asgi:application` child processes, as a deployment runs them,
with REDIS_URL set; the scripted model and the contract sub-agent are this process's loopback
servers. The database is a file of the test (SQLite), or a database of its own on the suite's
PostgreSQL when the suite runs there. Heartbeats are fast here (0.3 s, stale after 1.5 s) so that
a killed worker's run is recovered in a test's time.
"""
import shutil
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import psycopg
import pytest
from django.conf import settings

from campus_agent.tests.processes import asgi_processes, manage, project_env

SETUP = """
from django.core.management import call_command
from django.contrib.auth import get_user_model
from agents_app.models import Agent
from subagents_app.models import SubAgent
call_command("migrate", "--noinput", verbosity=0)
get_user_model().objects.create_user(username="20230001", password="s3cret-Pass!")
canteen = SubAgent.objects.create(name="canteen", description="食堂助手：菜单、人数", base_url="http://canteen.invalid",
                                  domain="canteen", timeout_sec=30)
agent = Agent.objects.create(slug="xiaozhi", name="小智", system_prompt="你是校园小智。", is_default=True)
agent.sub_agents.add(canteen)
"""


def _on_postgres() -> bool:
    return settings.DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"


@contextmanager
def _postgres_database(prefix: str, *, template: str | None = None) -> Iterator[tuple[str, str]]:
    """A database of its own on the suite's PostgreSQL (a copy of `template` when given), dropped
    afterwards: yields (name, URL)."""
    db = settings.DATABASES["default"]
    host, port = db["HOST"] or "127.0.0.1", db["PORT"] or 5432
    admin = f"host={host} port={port} user={db['USER']} dbname=postgres"
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
    try:
        yield name, f"postgres://{db['USER']}@{host}:{port}/{name}"
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def worker_template(tmp_path_factory):
    """A database migrated and set up (SETUP) once per test session, which each test of several
    workers copies: migrating costs seconds, copying nothing. SQLite: a file; PostgreSQL (when the
    suite runs there): a template database."""
    tmp = tmp_path_factory.mktemp("worker-template")
    if not _on_postgres():
        url = f"sqlite:///{tmp / 'template.sqlite3'}"
        _set_up(url, tmp)
        yield url
        return
    with _postgres_database("campus_agent_workers_tpl") as (name, url):
        _set_up(url, tmp)
        yield name


def _set_up(database_url: str, tmp) -> None:
    done = manage("shell", "-c", SETUP, env=project_env(tmp, DATABASE_URL=database_url, LOG_LEVEL="WARNING"))
    assert done.returncode == 0, done.stderr


@pytest.fixture
def worker_database(tmp_path, worker_template):
    """A database URL for the workers, migrated and set up: a copy of the session's template."""
    if not _on_postgres():
        path = tmp_path / "workers.sqlite3"
        shutil.copyfile(worker_template.removeprefix("sqlite:///"), path)
        yield f"sqlite:///{path}"
        return
    with _postgres_database("campus_agent_workers", template=worker_template) as (_, url):
        yield url


@pytest.fixture
def worker_env(tmp_path, worker_database, redis_url, llm_server, subagent_server) -> dict:
    """The environment of the workers; their database's `canteen` points at this test's sub-agent."""
    worker_sql(worker_database, "UPDATE subagents_app_subagent SET base_url = {} WHERE name = {}",
               (subagent_server.url, "canteen"))
    return project_env(
        tmp_path,
        DATABASE_URL=worker_database,
        REDIS_URL=redis_url,
        LLM_BASE_URL=llm_server.url,
        LLM_API_KEY="test-key",
        LLM_MODEL="fake-model",
        LLM_TIMEOUT="10",
        RUN_HEARTBEAT_SEC="0.3",
        RUN_STALE_SEC="1.5",
        LOG_LEVEL="WARNING",  # the children's stdout is a pipe nobody reads while they run
    )


@pytest.fixture
def workers(worker_env):
    """(A, B): two worker processes; each (base URL, process)."""
    with asgi_processes("uvicorn", env=worker_env, count=2) as (a, b):
        yield a, b


@pytest.fixture
def token(workers) -> dict:
    (a_url, _), _ = workers
    answer = httpx.post(f"{a_url}/api/v1/auth/token", json={"username": "20230001", "password": "s3cret-Pass!"})
    assert answer.status_code == 200, answer.text
    return {"Authorization": f"Bearer {answer.json()['access_token']}"}


def worker_sql(database_url: str, query: str, params: tuple = ()) -> list[tuple]:
    """Runs one statement on the workers' database (SQLite or PostgreSQL) and returns its rows:
    `{}` in `query` stands for each parameter's placeholder. A UUID parameter is passed as each
    backend stores it (Django keeps it as 32 hex digits in SQLite)."""
    if database_url.startswith("sqlite:///"):
        values = tuple(p.hex if isinstance(p, uuid.UUID) else p for p in params)
        with sqlite3.connect(database_url.removeprefix("sqlite:///"), timeout=10) as conn:
            return conn.execute(query.format(*["?"] * len(params)), values).fetchall()
    with psycopg.connect(database_url.replace("postgres://", "postgresql://", 1)) as conn:
        cursor = conn.execute(query.format(*["%s"] * len(params)), params)
        return cursor.fetchall() if cursor.description else []
