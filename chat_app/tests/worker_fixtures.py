"""Fixtures of the tests of several workers (test_runs_workers.py, test_approvals_workers.py),
registered in the root conftest.py.

Workers are `uvicorn campus_agent.asgi:application` child processes, as a deployment runs them,
with REDIS_URL set; the scripted model and the contract sub-agent are this process's loopback
servers. The database is a file of the test (SQLite), or a database of its own on the suite's
PostgreSQL when the suite runs there. Heartbeats are fast here (0.3 s, stale after 1.5 s) so that
a killed worker's run is recovered in a test's time.
"""
import uuid

import httpx
import psycopg
import pytest
from django.conf import settings

from campus_agent.tests.processes import asgi_process, manage, project_env

SETUP = """
from django.contrib.auth import get_user_model
from agents_app.models import Agent
from subagents_app.models import SubAgent
get_user_model().objects.create_user(username="20230001", password="s3cret-Pass!")
canteen = SubAgent.objects.create(name="canteen", description="食堂助手：菜单、人数", base_url={url!r},
                                  domain="canteen", timeout_sec=30)
agent = Agent.objects.create(slug="xiaozhi", name="小智", system_prompt="你是校园小智。", is_default=True)
agent.sub_agents.add(canteen)
"""


@pytest.fixture
def worker_database(tmp_path):
    """A database URL for the workers, migrated: SQLite by default, PostgreSQL like the suite."""
    if settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
        yield f"sqlite:///{tmp_path / 'workers.sqlite3'}"
        return
    db = settings.DATABASES["default"]
    name = f"campus_agent_workers_{uuid.uuid4().hex[:8]}"
    admin = f"host={db['HOST'] or '127.0.0.1'} port={db['PORT'] or 5432} user={db['USER']} dbname=postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{name}"
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def worker_env(tmp_path, worker_database, redis_url, llm_server, subagent_server) -> dict:
    """The environment of the workers, their database migrated and set up (SETUP)."""
    env = project_env(
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
    for args in (("migrate", "--noinput"), ("shell", "-c", SETUP.format(url=subagent_server.url))):
        done = manage(*args, env=env)
        assert done.returncode == 0, done.stderr
    return env


@pytest.fixture
def workers(worker_env):
    """(A, B): two worker processes; each (base URL, process)."""
    with asgi_process("uvicorn", env=worker_env) as a, asgi_process("uvicorn", env=worker_env) as b:
        yield a, b


@pytest.fixture
def token(workers) -> dict:
    (a_url, _), _ = workers
    answer = httpx.post(f"{a_url}/api/v1/auth/token", json={"username": "20230001", "password": "s3cret-Pass!"})
    assert answer.status_code == 200, answer.text
    return {"Authorization": f"Bearer {answer.json()['access_token']}"}
