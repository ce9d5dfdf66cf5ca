"""A warm parent for the child processes the tests start: the project's ASGI servers and its
manage.py commands (testkit/processes.py).

Each child would import the SDKs (openai, mcp, redis, a2a, psycopg, opentelemetry, Django's core)
afresh: ≈ 1.5 of the ≈ 2 CPU-seconds a child costs before it serves, some seventy times a run.
So each test process starts one zygote (`python -m testkit.zygote SOCKET`) that imports them
once — nothing of the project's and no settings: those belong to the child's own environment —
and forks a child per start. A start hands the zygote, over a Unix socket, the child's argv,
environment and working directory with its stdin, stdout, stderr and any file descriptor it must
keep at the same number (a listening socket named on its command line), by SCM_RIGHTS; the child
takes them as its own and runs `python -m …` or `python path …` as a fresh process would. The
zygote answers the child's pid at once and its exit status when it ends (negative: the signal
that ended it, as subprocess reports it).

`ZygoteProcess` is the part of subprocess.Popen the tests use (pid, poll, wait, send_signal,
terminate, kill, returncode, stdout). Same code, same per-test process; only the imports are
shared. The conformance client has a zygote of its own (testkit/mcp/conformance_client.py).
"""
import atexit
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

# Imported once in the zygote: what dominates a child's start (python -X importtime), and
# imports without Django's settings. Whatever a child needs beyond these it imports itself.
PRELOAD = (
    "openai", "openai.types.chat", "mcp", "mcp.types", "mcp.client.session", "mcp.client.streamable_http",
    "mcp.client.sse", "mcp.client.stdio", "mcp.server.lowlevel", "mcp.server.streamable_http_manager",
    "redis", "redis.asyncio", "a2a", "a2a.client", "a2a.types", "psycopg", "psycopg_pool", "pydantic", "httpx",
    "httpx_sse", "opentelemetry.trace", "opentelemetry.sdk.trace", "cryptography.fernet", "loguru", "yaml",
    "uvicorn", "uvicorn.main", "starlette.applications", "django", "django.db.models", "django.core.handlers.asgi",
    "django.http", "django.urls", "django.forms", "django.template", "jwt",
)
_LENGTH = struct.Struct("!I")
_STATUS = struct.Struct("!i")
STD_FDS = 3  # stdin, stdout, stderr: sent first, then the kept ones


# --- the zygote ----------------------------------------------------------------------------------

def _preload() -> None:
    for name in PRELOAD:
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 - not preloaded: the child imports it itself
            pass


def _received(conn: socket.socket) -> tuple[dict, list[int]]:
    header, fds, _, _ = socket.recv_fds(conn, _LENGTH.size, 64)
    (size,) = _LENGTH.unpack(header)
    payload = b""
    while len(payload) < size:
        chunk = conn.recv(size - len(payload))
        if not chunk:
            raise EOFError("the starter went away")
        payload += chunk
    return json.loads(payload), fds


def _child(request: dict, fds: list[int]) -> None:
    """The forked child: the starter's descriptors, environment and argv, then `python …`."""
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)
    targets = [0, 1, 2, *request["keep"]]
    high = max([*targets, *fds]) + 1
    moved = [os.dup2(fd, high + i) for i, fd in enumerate(fds)]  # out of the way of every target
    for fd in fds:
        os.close(fd)
    for fd, target in zip(moved, targets, strict=True):
        os.dup2(fd, target, inheritable=True)
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    import random

    random.seed()  # a fork shares its parent's generator state
    argv = request["argv"]
    status = 0
    try:
        import runpy

        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(argv)
            sys.path[0] = str(Path(argv[0]).resolve().parent)
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as exc:
        if isinstance(exc.code, int):
            status = exc.code
        elif exc.code is not None:
            print(exc.code, file=sys.stderr)
            status = 1
    except BaseException:  # noqa: BLE001 - reported as the exit status, like a crash of a fresh process
        import traceback

        traceback.print_exc()
        status = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001, S110 - a closed pipe: nothing more to say
            pass
    os._exit(status)


def serve(path: str) -> None:
    """Imports PRELOAD, then forks a child for every start asked of `path` (see above)."""
    _preload()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # Bound under another name and renamed once listening: the starter waits for `path` to exist,
    # and a connection between bind and listen is refused (CI's loaded run met that once).
    server.bind(path + ".binding")
    server.listen(64)
    os.rename(path + ".binding", path)
    selector = selectors.DefaultSelector()
    selector.register(server, selectors.EVENT_READ)
    waiting: dict[int, tuple[int, socket.socket]] = {}  # pidfd → (pid, the starter's connection)
    parent = os.getppid()
    print(f"zygote ready at {path}", file=sys.stderr, flush=True)
    while os.getppid() == parent:  # the test process that started it is gone: so is its zygote
        for key, _ in selector.select(timeout=1.0):
            if key.fileobj is server:
                conn, _ = server.accept()
                try:
                    request, fds = _received(conn)
                except (OSError, EOFError, ValueError, struct.error):
                    conn.close()
                    continue
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    server.close()
                    for pidfd, (_, other) in waiting.items():
                        os.close(pidfd)
                        other.close()
                    conn_fd = conn.detach()
                    os.close(conn_fd)
                    _child(request, fds)
                for fd in fds:
                    os.close(fd)
                pidfd = os.pidfd_open(pid)
                waiting[pidfd] = (pid, conn)
                selector.register(pidfd, selectors.EVENT_READ)
                try:
                    conn.sendall(_STATUS.pack(pid))
                except OSError:
                    os.kill(pid, signal.SIGKILL)  # its starter left before it knew the pid
            else:
                pidfd = key.fd
                pid, conn = waiting.pop(pidfd)
                selector.unregister(pidfd)
                os.close(pidfd)
                _, status = os.waitpid(pid, 0)
                try:
                    conn.sendall(_STATUS.pack(os.waitstatus_to_exitcode(status)))
                except OSError:
                    pass  # the starter left
                conn.close()


# --- the starters' side --------------------------------------------------------------------------

class ZygoteProcess:
    """A child of the zygote, seen as the tests see a subprocess.Popen."""

    def __init__(self, conn: socket.socket, pid: int, stdout):
        self._conn = conn
        self.pid = pid
        self.stdout = stdout
        self.returncode: int | None = None

    def _read_status(self, timeout: float | None) -> None:
        self._conn.settimeout(timeout)
        data = b""
        try:
            while len(data) < _STATUS.size:
                chunk = self._conn.recv(_STATUS.size - len(data))
                if not chunk:  # the zygote died: the child went with it
                    self.returncode = -signal.SIGKILL
                    return
                data += chunk
        except (TimeoutError, BlockingIOError):
            if data:  # half a status: wait for the rest, it is on its way
                self._conn.settimeout(None)
                data += self._conn.recv(_STATUS.size - len(data))
            else:
                return
        (self.returncode,) = _STATUS.unpack(data)
        self._conn.close()

    def poll(self) -> int | None:
        if self.returncode is None:
            self._read_status(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self._read_status(timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Zygote:
    """This test process's zygote, started at its first use (a fresh process costs what it costs
    until then) and stopped when the process exits."""

    def __init__(self):
        self._dir = tempfile.mkdtemp(prefix="zygote-")
        self.path = os.path.join(self._dir, "zygote.sock")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop("DJANGO_SETTINGS_MODULE", None)
        self._log = open(os.path.join(self._dir, "zygote.log"), "wb")  # noqa: SIM115 - open as long as it runs
        self._process = subprocess.Popen([sys.executable, "-m", "testkit.zygote", self.path], env=env,
                                         cwd=Path(__file__).resolve().parent.parent, stdout=self._log,
                                         stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while not os.path.exists(self.path):
            if self._process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the zygote did not start: {Path(self._log.name).read_text()}")
            time.sleep(0.05)
        atexit.register(self.stop)

    def popen(self, argv: list[str], *, env: dict, cwd, keep: tuple[int, ...] = (), stdout=None,
              stderr=None) -> ZygoteProcess:
        """Starts `python *argv` as a child of the zygote. `stdout`: subprocess.PIPE (read it as
        `.stdout`, text) or None (the zygote's log); `stderr`: subprocess.STDOUT, PIPE or None."""
        read_out = write_out = read_err = write_err = None
        if stdout == subprocess.PIPE:
            read_out, write_out = os.pipe()
        if stderr == subprocess.PIPE:
            read_err, write_err = os.pipe()
        out = write_out if write_out is not None else self._log.fileno()
        err = out if stderr == subprocess.STDOUT else (write_err if write_err is not None else self._log.fileno())
        stdin = os.open(os.devnull, os.O_RDONLY)
        payload = json.dumps({"argv": list(argv), "env": env, "cwd": str(cwd), "keep": list(keep)}).encode()
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(self.path)
            socket.send_fds(conn, [_LENGTH.pack(len(payload))], [stdin, out, err, *keep])
            conn.sendall(payload)
            data = b""
            while len(data) < _STATUS.size:
                chunk = conn.recv(_STATUS.size - len(data))
                if not chunk:
                    raise RuntimeError("the zygote did not start the child")
                data += chunk
        except BaseException:
            conn.close()
            for fd in (read_out, read_err):
                if fd is not None:
                    os.close(fd)
            raise
        finally:
            os.close(stdin)
            for fd in (write_out, write_err):
                if fd is not None:
                    os.close(fd)
        (pid,) = _STATUS.unpack(data)
        process = ZygoteProcess(conn, pid, open(read_out, encoding="utf-8", errors="replace")  # noqa: SIM115
                                if read_out is not None else None)
        process.stderr = open(read_err, encoding="utf-8", errors="replace") if read_err is not None else None  # noqa: SIM115
        return process

    def run(self, argv: list[str], *, env: dict, cwd, timeout: float) -> subprocess.CompletedProcess:
        """subprocess.run(capture_output=True, text=True) for `python *argv`, in a child."""
        process = self.popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        captured: dict[str, str] = {}
        readers = [threading.Thread(target=lambda name=name, stream=stream: captured.__setitem__(name, stream.read()),
                                    daemon=True)
                   for name, stream in (("stdout", process.stdout), ("stderr", process.stderr))]
        for reader in readers:
            reader.start()
        try:
            returncode = process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
        for reader in readers:
            reader.join()
        process.stdout.close()
        process.stderr.close()
        return subprocess.CompletedProcess([sys.executable, *argv], returncode, captured["stdout"], captured["stderr"])

    def stop(self) -> None:
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
        self._log.close()


_zygote: Zygote | None = None
_lock = threading.Lock()


def zygote() -> Zygote:
    """This test process's zygote (started on first use)."""
    global _zygote
    with _lock:
        if _zygote is None or _zygote._process.poll() is not None:
            _zygote = Zygote()
        return _zygote


if __name__ == "__main__":
    serve(sys.argv[1])
