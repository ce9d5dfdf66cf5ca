"""Issue 20 point 10: `scripts/run.sh` with its port taken fails at once, before any set-up."""
import os
import socket
import subprocess
import time

from django.conf import settings


def test_run_sh_with_its_port_taken_fails_fast_and_says_how_to_pick_another():
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        started = time.monotonic()
        env = {**os.environ, "PORT": str(port), "DATABASE_URL": "sqlite:////nonexistent/never-migrated.sqlite3"}
        done = subprocess.run([str(settings.BASE_DIR / "scripts" / "run.sh")], env=env, capture_output=True,
                              text=True, timeout=60)
    finally:
        taken.close()
    assert done.returncode == 1
    assert time.monotonic() - started < 5  # no venv check, no migrate, no demo load
    assert f"port {port} on 127.0.0.1 is already in use" in done.stderr
    assert "PORT=8001 scripts/run.sh" in done.stderr
    assert "Operations to perform" not in done.stdout  # migrate never ran
