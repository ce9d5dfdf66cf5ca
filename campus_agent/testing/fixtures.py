"""Fixtures every app's tests build on."""
import os
from contextlib import contextmanager

import pytest
from django.contrib.auth import get_user_model


@pytest.fixture
def password() -> str:
    return "s3cret-Pass!"


@pytest.fixture
def user(db, password):
    return get_user_model().objects.create_user(username="20230001", password=password, first_name="小明")


@pytest.fixture
def staff_user(db, password):
    return get_user_model().objects.create_user(username="teacher", password=password, is_staff=True, is_superuser=True)


@pytest.fixture
def staff_client(client, staff_user):
    """The test client logged in as `staff_user` (admin pages)."""
    client.force_login(staff_user)
    return client


@pytest.fixture
def student_client(client, user):
    """The test client logged in as the student `user`."""
    client.force_login(user)
    return client


@pytest.fixture
def editor_user(db, password):
    """Staff, not a superuser, allowed to view and change the catalog (agents, MCP services,
    sub-agents) and nothing else: the staff member who must not be able to run programs."""
    from django.contrib.auth.models import Permission

    editor = get_user_model().objects.create_user(username="editor", password=password, is_staff=True)
    codenames = [f"{action}_{model}" for action in ("view", "change") for model in ("agent", "mcpservice", "subagent")]
    editor.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    return editor


@pytest.fixture
def editor_client(client, editor_user):
    """The test client logged in as `editor_user`."""
    client.force_login(editor_user)
    return client


@contextmanager
def project_served(wrap=None):
    """The whole project (campus_agent.asgi, `wrap(application)` when given) on uvicorn in a
    thread of this process, against the test database: yields the ThreadedAsgiServer."""
    from campus_agent.asgi import application
    from campus_agent.testing.servers import ThreadedAsgiServer

    with ThreadedAsgiServer(wrap(application) if wrap else application) as server:
        yield server


def project_server_reset(server) -> None:
    """Ends everything a test left running on the project server's loop (its runs, their tools'
    calls, the streams it serves, the run supervisor) and waits for it, as stopping the server
    did: runs left running store their replies as interrupted now, before the test's database
    is flushed. The next request starts the supervisor again, which first finishes the runs
    left stale, as a restarted worker does; an MCP session whose owner task ended is opened anew
    on its next use (agents_app.mcp.pool).

    A cancelled task stops awaiting its database call, not the call: a run's storing task
    (cancelled with the others) leaves its thread writing. The stream path's database threads
    are waited for, and their connections closed, too: a write still going on when the test's
    tables are flushed deadlocked with the flush on PostgreSQL, and the thread's connection
    was left in its transaction, so every later flush of the test database waited for it."""
    from campus_agent.asyncdb import db_connections_close

    server.tasks_cancel(everything=True)
    db_connections_close()


@pytest.fixture(scope="session")
def live_asgi_session(django_db_setup):
    """The project server, started once per test session (`live_asgi` resets it after each test)."""
    with project_served() as server:
        yield server


@pytest.fixture
def live_asgi(transactional_db, live_asgi_session):
    """The whole project (campus_agent.asgi) served by uvicorn on loopback, against the test DB.

    Use with `@pytest.mark.django_db(transaction=True)`: the server thread only sees committed
    rows. Yields the base URL, e.g. http://127.0.0.1:43121. One server for the session; what a
    test leaves running on it is ended after the test (`project_server_reset`).
    """
    yield live_asgi_session.url
    project_server_reset(live_asgi_session)


TEST_REDIS_URL_DEFAULT = "redis://127.0.0.1:6379/15"


@pytest.fixture(scope="session")
def redis_url_session() -> str:
    """TEST_REDIS_URL (database 15 by default), checked once: it answers."""
    import os

    import redis

    url = os.environ.get("TEST_REDIS_URL", TEST_REDIS_URL_DEFAULT)
    try:
        redis.Redis.from_url(url, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        pytest.fail(f"These tests need Redis at {url} (scripts/test.sh starts one; or set TEST_REDIS_URL): {exc}",
                    pytrace=False)
    return url


@pytest.fixture
def redis_url(redis_url_session) -> str:
    """A real Redis for the tests of several workers (TEST_REDIS_URL, database 15 by default).
    `scripts/test.sh` starts one when none answers; without one these tests fail, never skip.

    The tests share one Redis database (a test of several workers empties it; the slots of user 1
    of one test are those of another's), so one test at a time holds it: the others, in the
    other pytest-xdist workers or another run of the suite on the same database, wait for the
    lock (a file lock, released when the test's fixtures are torn down, or its process dies)."""
    import fcntl
    import hashlib
    import tempfile

    digest = hashlib.sha256(redis_url_session.encode()).hexdigest()[:12]
    with open(os.path.join(tempfile.gettempdir(), f"campus_agent_test_redis_{digest}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield redis_url_session


@contextmanager
def redis_cache_shared(settings, redis_url: str, *, key_prefix: str):
    """The Django cache on the test Redis for the block (as REDIS_URL makes it), with the keys
    matching `*<key_prefix>:*` removed before and after: what a test of several workers shares."""
    import redis
    from django.core.cache import caches

    def forget() -> None:
        client = redis.Redis.from_url(redis_url)
        for key in client.scan_iter(f"*{key_prefix}:*"):
            client.delete(key)

    forget()
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": redis_url}}
    assert type(caches["default"]).__name__ == "RedisCache"
    try:
        yield
    finally:
        forget()


class _SpanRecorder:
    """Tracing on, every finished span kept in memory by the OpenTelemetry SDK's own
    InMemorySpanExporter; `wait_for(name)` waits (on the export, not a sleep) for a span that is
    ended after the client already has its answer, such as a run's.

    OpenTelemetry sets the process's global provider once, and the `mcp` SDK makes its spans
    (and injects their traceparent) through it. So that the tests after this one run as a
    process without tracing does, the global provider is `switched`: while no test keeps spans
    its tracers hand out the API's invalid span, exactly what the default no-op provider does."""

    def __init__(self):
        import threading
        from contextlib import contextmanager

        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        from campus_agent.tracing import masking_exporter, request_id_span_processor

        recorder = self
        self._ended = threading.Condition()
        self.keeping = False

        class NotifyingExporter(InMemorySpanExporter):
            def export(self, spans):
                result = super().export(spans)
                with recorder._ended:
                    recorder._ended.notify_all()
                return result

        class SwitchedTracer(trace.Tracer):
            def __init__(self, real):
                self._real = real

            def start_span(self, *args, **kwargs):
                return self._real.start_span(*args, **kwargs) if recorder.keeping else trace.INVALID_SPAN

            @contextmanager
            def start_as_current_span(self, *args, **kwargs):
                if not recorder.keeping:
                    yield trace.INVALID_SPAN
                    return
                with self._real.start_as_current_span(*args, **kwargs) as span:
                    yield span

        class SwitchedProvider(trace.TracerProvider):
            def get_tracer(self, *args, **kwargs):
                return SwitchedTracer(sdk_provider.get_tracer(*args, **kwargs))

        self.exporter = NotifyingExporter()
        sdk_provider = TracerProvider()
        sdk_provider.add_span_processor(request_id_span_processor())  # as tracing_provider_build does
        sdk_provider.add_span_processor(SimpleSpanProcessor(masking_exporter(self.exporter)))  # as there too
        self.provider = SwitchedProvider()

    def spans(self) -> list:
        return list(self.exporter.get_finished_spans())

    def named(self, prefix: str) -> list:
        return [s for s in self.spans() if s.name.startswith(prefix)]

    def wait_for(self, prefix: str, *, count: int = 1, timeout: float = 10.0) -> list:
        with self._ended:
            if not self._ended.wait_for(lambda: len(self.named(prefix)) >= count, timeout=timeout):
                raise AssertionError(f"no {count} span(s) {prefix!r} ended within {timeout}s: {[s.name for s in self.spans()]}")
        return self.named(prefix)


_span_recorder: _SpanRecorder | None = None


@pytest.fixture
def spans():
    """Tracing on for this test (campus_agent.tracing), spans recorded in memory: `.spans()`,
    `.named(prefix)`, `.wait_for(prefix)`. The provider becomes the process's global one (the
    `mcp` SDK's client and server spans land there too) and stays so: OpenTelemetry sets it once."""
    global _span_recorder
    from campus_agent.tracing import tracing_start, tracing_stop

    if _span_recorder is None:
        _span_recorder = _SpanRecorder()
    _span_recorder.exporter.clear()
    _span_recorder.keeping = True
    tracing_start(_span_recorder.provider)
    yield _span_recorder
    tracing_stop()
    _span_recorder.keeping = False
    _span_recorder.exporter.clear()
