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
