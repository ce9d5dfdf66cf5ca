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


def _run_in_a_copy(tmp_path, *, env_file: str, port: str | None) -> subprocess.CompletedProcess:
    """scripts/run.sh copied beside a .env of the test's (the project's own .env is left alone),
    run from that directory."""
    (tmp_path / "scripts").mkdir()
    script = tmp_path / "scripts" / "run.sh"
    script.write_text((settings.BASE_DIR / "scripts" / "run.sh").read_text())
    script.chmod(0o755)
    (tmp_path / ".env").write_text(env_file)
    env = {k: v for k, v in os.environ.items() if k != "PORT"} | ({"PORT": port} if port else {})
    return subprocess.run([str(script)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)


def test_run_sh_reads_port_from_env_file_and_the_environment_wins(tmp_path):
    """.env.example lists PORT, and the settings read it from .env: so does the run command (issue 42)."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        done = _run_in_a_copy(tmp_path, env_file=f"# the port\nDEBUG=true\nPORT=\"{port}\"  # taken\n", port=None)
        assert done.returncode == 1 and f"port {port} on 127.0.0.1 is already in use" in done.stderr

        other = tmp_path / "other"
        other.mkdir()
        done = _run_in_a_copy(other, env_file="PORT=1\n", port=str(port))  # the environment's PORT wins
        assert done.returncode == 1 and f"port {port} on 127.0.0.1 is already in use" in done.stderr
    finally:
        taken.close()
