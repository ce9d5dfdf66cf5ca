"""Run the project the way an operator does: manage.py and ASGI servers as child processes.

A server gets a socket the test bound to 127.0.0.1 port 0 (passed as an inherited fd), so
there is no port to guess and no race for one. The children are forked by this test process's
zygote (testkit/zygote.py), which has the SDKs imported already; daphne's servers, and a command
asked for `fresh`, are started from scratch (daphne installs Twisted's reactor as it imports).
"""
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from django.conf import settings

from testkit.zygote import zygote

BASE_DIR = Path(settings.BASE_DIR)
# daphne imports Twisted, which installs its reactor: a fresh process each. TESTKIT_ZYGOTE=0
# starts every child from scratch (to compare, or to rule the zygote out).
ZYGOTE_ON = os.environ.get("TESTKIT_ZYGOTE", "1") != "0"
FORKED = {"uvicorn"} if ZYGOTE_ON else set()
SERVERS = {
    "uvicorn": lambda fd: ["-m", "uvicorn", "campus_agent.asgi:application", "--fd", str(fd), "--log-level", "warning"],
    "daphne": lambda fd: ["-m", "daphne", "--fd", str(fd), "-v", "0", "campus_agent.asgi:application"],
}


def project_env(tmp_path: Path, **overrides: str) -> dict:
    """The caller's environment minus the project's own variables, so a child sees only what
    the test sets (the lead may run the suite with DATABASE_URL pointing at PostgreSQL)."""
    ours = set(env_example_keys())
    env = {k: v for k, v in os.environ.items() if k not in ours}
    env.update({"LOG_DIR": str(tmp_path / "logs"), "PYTHONUNBUFFERED": "1", **overrides})
    return env


def env_example_keys() -> list[str]:
    """The variables .env.example documents: every one the project reads."""
    lines = (BASE_DIR / ".env.example").read_text(encoding="utf-8").splitlines()
    return [line.split("=", 1)[0] for line in lines if "=" in line and not line.startswith("#")]


def manage(*args: str, env: dict, timeout: float = 120, fresh: bool = False) -> subprocess.CompletedProcess:
    """`python manage.py *args` in a child; `fresh`: a process started from scratch (a test of
    what a fresh process imports)."""
    if ZYGOTE_ON and not fresh:
        return zygote().run(["manage.py", *args], env=env, cwd=BASE_DIR, timeout=timeout)
    return subprocess.run(  # noqa: PLW1510 (callers assert the return code)
        [sys.executable, "manage.py", *args], cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=timeout
    )


@contextmanager
def asgi_process(kind: str, *, env: dict, start_timeout: float = 60) -> Iterator[tuple[str, subprocess.Popen]]:
    """Starts `uvicorn`/`daphne campus_agent.asgi:application`; yields its base URL and process
    (a test may kill it)."""
    with asgi_processes(kind, env=env, count=1, start_timeout=start_timeout) as [served]:
        yield served


@contextmanager
def asgi_processes(
    kind: str, *, env: dict, count: int, start_timeout: float = 60
) -> Iterator[list[tuple[str, subprocess.Popen]]]:
    """Starts `count` servers at once (each imports Django for a few seconds: side by side, not
    one after the other); yields their (base URL, process) once all answer."""
    started: list[tuple[str, subprocess.Popen]] = []
    try:
        for _ in range(count):
            started.append(_spawn(kind, env))
        for url, proc in started:
            _wait_until_serving(proc, url, start_timeout)
        yield started
    finally:
        for _, proc in started:
            if proc.poll() is None:
                proc.terminate()
        for _, proc in started:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _spawn(kind: str, env: dict) -> tuple[str, subprocess.Popen]:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    fd = listener.fileno()
    try:
        if kind in FORKED:
            proc = zygote().popen(SERVERS[kind](fd), env=env, cwd=BASE_DIR, keep=(fd,), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT)
        else:
            proc = subprocess.Popen(
                [sys.executable, *SERVERS[kind](fd)],
                cwd=BASE_DIR,
                env=env,
                pass_fds=[fd],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
    finally:
        listener.close()  # the child holds its own copy
    return url, proc


@contextmanager
def asgi_server(kind: str, *, env: dict, start_timeout: float = 60) -> Iterator[str]:
    """Starts `uvicorn`/`daphne campus_agent.asgi:application`; yields its base URL."""
    with asgi_process(kind, env=env, start_timeout=start_timeout) as (url, _):
        yield url


def _wait_until_serving(proc: subprocess.Popen, url: str, timeout: float) -> None:
    # Connections queue on the listening socket before the child accepts them; a long read
    # timeout covers Django's import time, the loop covers a child that died.
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{proc.stdout.read()}")
        try:
            httpx.get(f"{url}/healthz", timeout=2)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise RuntimeError("server did not answer in time")
