"""Root conftest: registers each app's fixture modules (the test servers live beside them)."""
import pytest

pytest_plugins = [
    "campus_agent.testing.suite_settings",
    "campus_agent.testing.fixtures",
    "subagents_app.testing.fixtures",
    "agents_app.testing.fixtures",
    "chat_app.tests.browser_fixtures",
    "chat_app.tests.worker_fixtures",
]


# A test that asks for one of these (or has a `django_db` mark) uses the suite's database; the
# tests of several workers make theirs on the suite's server (worker_fixtures.py).
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


@pytest.fixture(scope="session", autouse=True)
def _stream_db_connections_closed(django_db_setup, django_db_blocker):
    """Threads that outlive a test keep a database connection: the stream path's database
    threads (chat_app.asyncdb) and asgiref's one thread for thread-sensitive calls made outside
    a request (runtime tests). Close them before pytest-django drops the test database, which
    PostgreSQL refuses while they are open."""
    yield
    from asgiref.sync import SyncToAsync
    from django.db import connections

    from chat_app.asyncdb import db_connections_close

    with django_db_blocker.unblock():
        db_connections_close()
        SyncToAsync.single_thread_executor.submit(connections.close_all).result(timeout=10)
