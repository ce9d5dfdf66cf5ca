"""Login throttling holds across workers: two servers, two processes, one Redis (REDIS_URL).

Worker A is `uvicorn campus_agent.asgi:application` in a child process with REDIS_URL set, as a
deployment runs it; worker B is this process's live server with the cache pointed at the same
Redis database. Failures counted by one lock the other out. Redis database 15 by default
(TEST_REDIS_URL to choose another; the `redis_url` fixture); only the throttle's keys are removed before and after.
"""
import pytest

from chat_app.accounts.throttle import KEY_PREFIX
from chat_app.tests.accounts.test_login_throttle import THROTTLED, _token
from testkit.fixtures.base import redis_cache_shared
from testkit.processes import asgi_server, manage, project_env

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def shared_cache(settings, redis_url):
    with redis_cache_shared(settings, redis_url, key_prefix=KEY_PREFIX):
        yield


@pytest.fixture
def worker_a(tmp_path, shared_cache, redis_url):
    env = project_env(tmp_path, DATABASE_URL=f"sqlite:///{tmp_path / 'worker_a.sqlite3'}", REDIS_URL=redis_url)
    done = manage("migrate", "--noinput", env=env)
    assert done.returncode == 0, done.stderr
    with asgi_server("uvicorn", env=env) as url:
        yield url


def test_failures_on_one_worker_lock_the_other_out(worker_a, live_asgi, user, password):
    for n in range(5):  # the username, guessed at worker A (its own database: the user is unknown there)
        assert _token(worker_a, user.username, f"guess-{n}", ip="10.9.0.1").status_code == 401
    refused = _token(live_asgi, user.username, password, ip="10.9.0.2")  # worker B: right password
    assert refused.status_code == 429
    assert refused.json() == {"code": 42903, "message": THROTTLED}

    for n in range(20):  # an address, failing at worker B …
        assert _token(live_asgi, f"someone{n}", "guess", ip="10.9.0.3").status_code == 401
    at_a = _token(worker_a, "anyone", "guess", ip="10.9.0.3")  # … is refused by worker A
    assert at_a.status_code == 429 and 0 < int(at_a.headers["Retry-After"]) <= 900
