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
