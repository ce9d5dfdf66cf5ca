"""Root conftest: registers testkit's fixture modules, marks the tests that use no database, runs a
`timing` test alone, clears the cache around every test, and at a pass's end closes the
connections it kept and checks that no session is left on the test database."""
import fcntl
import gc
import os
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

pytest_plugins = [
    "testkit.suite_settings",
    "testkit.fixtures.base",
    "testkit.fixtures.subagents",
    "testkit.fixtures.agents",
    "testkit.fixtures.safety",
    "testkit.fixtures.browser",
    "testkit.fixtures.workers",
    "testkit.fixtures.embeddings",
    "testkit.fixtures.rerank",
]


# A test that asks for one of these (or has a `django_db` mark) uses the suite's database; the
# tests of several workers make theirs on the suite's server (testkit/fixtures/workers.py).
DATABASE_FIXTURES = frozenset(
    {"db", "transactional_db", "django_db_reset_sequences", "django_db_serialized_rollback", "worker_database"}
)


def pytest_collection_modifyitems(config, items) -> None:
    """Marks `no_database` the tests that use no database of the suite's, so that the PostgreSQL
    pass of .ci/run can leave them out: they ran on the SQLite pass, and nothing in them changes
    with the database. (pytest-django refuses database access to a test without a database
    fixture or mark, so one that does not ask for it cannot use it by mistake.)"""
    for item in items:
        if item.get_closest_marker("django_db") is None and not DATABASE_FIXTURES & set(item.fixturenames):
            item.add_marker(pytest.mark.no_database)


@contextmanager
def _flock(path, mode: int):
    with open(path, "a") as fh:
        fcntl.flock(fh, mode)
        yield


@pytest.fixture(autouse=True)
def _timing_tests_alone(request, tmp_path_factory):
    """Under pytest-xdist, a test marked `timing` (it asserts that an event loop or a server
    never stalls for more than tens of milliseconds) runs while no other test of the run does:
    a second process busy on the other core of a 2-core machine is what it would measure. The
    other tests hold a shared file lock, a `timing` test the exclusive one; a turnstile lock
    taken first keeps a waiting `timing` test from being overtaken by the others' next tests.
    TEST_TIMING_LOCK_DIR names a directory several runs share (.ci/run's two passes side by
    side): then the tests of every run take these locks."""
    shared_dir = os.environ.get("TEST_TIMING_LOCK_DIR")
    if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) < 2 and not shared_dir:
        yield
        return
    run_dir = Path(shared_dir) if shared_dir else tmp_path_factory.getbasetemp().parent  # shared by its workers
    turnstile, lock = run_dir / "timing-turnstile.lock", run_dir / "timing.lock"
    alone = request.node.get_closest_marker("timing") is not None
    with ExitStack() as held:
        with _flock(turnstile, fcntl.LOCK_EX):
            held.enter_context(_flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH))
        yield


@pytest.fixture(autouse=True)
def _fresh_cache():
    """Circuit breakers, rate windows, stream slots and token counters live in the suite's
    (process-local) cache: no test inherits another's. (A breaker opened by one test's failing
    sub-agent once made a later test's keyword routing skip that sub-agent.)"""
    from django.core.cache import cache

    cache.clear()
    yield
    cache.clear()


@pytest.fixture(scope="session", autouse=True)
def _stream_db_connections_closed(django_db_setup, django_db_blocker):
    """Threads that outlive a test keep a database connection: the stream path's database
    threads (campus_agent.base.asyncdb) and asgiref's one thread for thread-sensitive calls made outside
    a request (runtime tests). Close them before pytest-django drops the test database, which
    PostgreSQL refuses while they are open; on PostgreSQL a closed connection only goes back to
    psycopg's pool (settings: OPTIONS["pool"]), which keeps it open, so the pools are closed too
    (they were what "database … is being accessed by other users" at the end of a pass was)."""
    yield
    from asgiref.sync import SyncToAsync
    from django.db import connections

    from campus_agent.base.asyncdb import db_connections_close

    with django_db_blocker.unblock():
        db_connections_close()
        SyncToAsync.single_thread_executor.submit(connections.close_all).result(timeout=10)
        connections.close_all()
        for connection in connections.all(initialized_only=True):
            if hasattr(connection, "close_pool"):  # the PostgreSQL backend's
                connection.close_pool()
        # A connection its thread dropped without closing it (a thread that ended) is closed by
        # its finalizer, which waits for a collection when the connection sits in a reference
        # cycle; importing campus_agent.asgi froze this process's heap (never collected) and made
        # full collections rare, so the heap is unfrozen and collected here, at the pass's end.
        gc.unfreeze()
        gc.collect()
        if connections["default"].vendor == "postgresql":
            _others_gone(connections["default"].settings_dict)


OTHERS_GONE_SEC = 10


def _others_gone(settings_dict: dict) -> None:
    """Waits until no other session is on the test database, then returns; fails, naming each
    one, if some stay. A process a test stopped (a worker, a manage.py command) leaves its server
    session behind for as long as PostgreSQL takes to see its socket close. pytest-django's DROP
    DATABASE was refused twice on 5 December 2026 ("1 other session", idle since early in the
    pass): a session that stays is a connection left open, and the failure names its process and
    thread (testkit/suite_settings.py) and what it last ran."""
    import time

    import psycopg

    name = settings_dict["NAME"]
    params = {key: value for key, value in (("host", settings_dict["HOST"]), ("port", settings_dict["PORT"]),
                                            ("user", settings_dict["USER"]), ("password", settings_dict["PASSWORD"]))
              if value}
    deadline = time.monotonic() + OTHERS_GONE_SEC
    with psycopg.connect(dbname="postgres", autocommit=True, **params) as conn:
        while True:
            others = conn.execute(
                "SELECT pid, application_name, state, backend_start, left(query, 200) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid()", [name]).fetchall()
            if not others:
                return
            if time.monotonic() > deadline:
                pytest.fail(f"sessions left open on {name} at the end of the pass: {others}", pytrace=False)
            conn.execute("SELECT pg_sleep(0.05)")
