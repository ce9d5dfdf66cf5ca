"""Settings for the test run only (registered in the root conftest's pytest_plugins)."""
import os
import tempfile


def pytest_configure(config) -> None:
    from django.conf import settings

    # PBKDF2 costs ~0.3 s per password on a small machine and most tests create a user or two;
    # the hash algorithm is not under test anywhere, the login flows are.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    # The demo sub-agents are mounted as scripts/run.sh mounts them (the URLconf is read once, at
    # the first request): the demo, fallback and page tests talk to them over a socket.
    # test_demo_agents checks in real server processes that they are off by default.
    settings.DEMO_ENABLED = True
    # SQLite: a test database in a file, not Django's default shared-cache memory database. Runs
    # write in the background (heartbeats, checkpoints, tool rounds) while tests read, and shared
    # cache answers such overlaps with "database table is locked" at once; a file in WAL mode
    # (the project's SQLite options) lets readers run beside the writer and waits for the lock.
    database = settings.DATABASES["default"]
    if database["ENGINE"] == "django.db.backends.sqlite3":
        name = os.path.join(tempfile.gettempdir(), f"campus_agent_test_{os.getpid()}.sqlite3")
        database.setdefault("TEST", {})["NAME"] = name
    if database["ENGINE"] == "django.db.backends.postgresql":
        _postgres_flush_by_delete()
        _postgres_sessions_named()
    if database["ENGINE"] == "django.db.backends.sqlite3":
        _sqlite_flush_keeps()
    _flush_without_post_migrate()
    _loopback_clients_share_one_tls_context()


# What migrate made and no test changes: kept by the flush on PostgreSQL, so the post_migrate
# handlers that follow it find every row and make none again.
FLUSH_KEEPS = ("django_content_type", "auth_permission")
# Append-only on PostgreSQL: a trigger refuses DELETE on it (audit_app/migrations/0002_append_only.py),
# not TRUNCATE, which fires no row trigger.
FLUSH_TRUNCATES = ("audit_app_auditevent",)


def _postgres_flush_by_delete() -> None:
    """Each `transaction=True` test ends with Django's flush of every table, on PostgreSQL one
    TRUNCATE of all of them (0.15–0.35 s here: TRUNCATE makes each table's and index's files
    anew), then the post_migrate handlers make the content types and permissions again (another
    0.1–0.2 s of inserts). A test leaves a few rows, which DELETE removes in milliseconds: the
    same empty tables, as SQLite's flush (which deletes too) leaves them, except FLUSH_KEEPS. The
    foreign keys, which Django makes DEFERRABLE INITIALLY DEFERRED, are checked at the flush's
    commit. Neither flush resets the sequences; one asked to, or to CASCADE, still truncates."""
    from django.db.backends.postgresql.operations import DatabaseOperations

    truncate = DatabaseOperations.sql_flush

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if reset_sequences or allow_cascade or not tables:
            return truncate(self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
        deletes = [f"{style.SQL_KEYWORD('TRUNCATE' if table in FLUSH_TRUNCATES else 'DELETE FROM')} "
                   f"{style.SQL_FIELD(self.quote_name(table))};"
                   for table in tables if table not in FLUSH_KEEPS]
        return [style.SQL_KEYWORD("SET CONSTRAINTS ALL DEFERRED;"), *deletes]

    DatabaseOperations.sql_flush = sql_flush


def _postgres_sessions_named() -> None:
    """Each session the suite opens on PostgreSQL names its process and thread (application_name,
    set when Django takes the connection): a session left open at the end of a pass is then
    named by the root conftest's check, not only counted by DROP DATABASE's refusal."""
    import threading

    from django.db.backends.signals import connection_created

    def name_session(sender, connection, **kwargs) -> None:
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SELECT set_config('application_name', %s, false)",
                               [f"pytest pid {os.getpid()} {threading.current_thread().name}"[:63]])

    connection_created.connect(name_session, weak=False, dispatch_uid="suite_sessions_named")


def _sqlite_flush_keeps() -> None:
    """SQLite's flush deletes every table's rows, FLUSH_KEEPS too, which the post_migrate handlers
    then insert again (content types, every permission: 6 % of a transactional test's CPU). Kept,
    as on PostgreSQL, the handlers find them and make none."""
    from django.db.backends.sqlite3.operations import DatabaseOperations

    flush = DatabaseOperations.sql_flush

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        kept = tables if reset_sequences else [table for table in tables if table not in FLUSH_KEEPS]
        return flush(self, style, kept, reset_sequences=reset_sequences, allow_cascade=allow_cascade)

    DatabaseOperations.sql_flush = sql_flush


def _flush_without_post_migrate() -> None:
    """The flush that ends a `transaction=True` test then sends post_migrate, whose handlers look
    for every model's content type and permissions and, since the flush kept FLUSH_KEEPS (above),
    find them all and make none: 80 % of the flush's CPU for nothing. Such a flush skips them; one
    that resets sequences or cascades, which truncates everything, still sends the signal."""
    from django.core.management.commands import flush

    handle = flush.Command.handle

    def handle_keeping(self, **options):
        if not options.get("reset_sequences", True) and not options.get("allow_cascade", False):
            options["inhibit_post_migrate"] = True
        return handle(self, **options)

    flush.Command.handle = handle_keeping


def _loopback_clients_share_one_tls_context() -> None:
    """httpx (and httpx2, the fork the openai and mcp SDKs use) builds a TLS context for every
    client, loading the whole CA bundle (about 20 ms here) even for a plain-HTTP request to
    loopback, and the tests make a client per request or two: a tenth of the suite's CPU. The
    default context (verify=True, no client certificate) is made once per library and shared, as
    one long-lived client would share it; nothing in the suite speaks TLS, and an explicit
    `verify=` or `cert=` still gets its own."""
    import functools
    import importlib

    for library in ("httpx", "httpx2"):
        config = importlib.import_module(f"{library}._config")
        transports = importlib.import_module(f"{library}._transports.default")
        make = config.create_ssl_context
        shared = functools.lru_cache(maxsize=2)(
            lambda trust_env, make=make: make(verify=True, cert=None, trust_env=trust_env))

        def create_ssl_context(verify=True, cert=None, trust_env=True, make=make, shared=shared):
            if verify is True and cert is None:
                return shared(bool(trust_env))
            return make(verify=verify, cert=cert, trust_env=trust_env)

        config.create_ssl_context = create_ssl_context
        transports.create_ssl_context = create_ssl_context
