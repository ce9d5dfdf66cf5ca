"""The zygote (testkit/zygote.py) starts a child as a fresh `python …` would: the starter's argv,
environment, working directory, output and kept file descriptors; its exit status, or the signal
that ended it, as subprocess reports it."""
import signal
import socket
import subprocess

import pytest

from testkit.zygote import zygote

CHILD = """
import os, socket, sys, time
print("argv", sys.argv[1:], "env", os.environ.get("ZYGOTE_TEST"), "cwd", os.getcwd())
print("to stderr", file=sys.stderr)
if sys.argv[1] == "serve":
    listener = socket.socket(fileno=int(sys.argv[2]))
    conn, _ = listener.accept()
    conn.sendall(b"hello from the child")
    conn.close()
if sys.argv[1] == "sleep":
    print("sleeping", flush=True)
    time.sleep(60)
sys.exit(int(sys.argv[2]) if sys.argv[1] == "plain" else 0)
"""


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "child.py"
    path.write_text(CHILD)
    return path


def test_a_child_gets_its_argv_environment_directory_output_and_exit_status(script, tmp_path):
    done = zygote().run([str(script), "plain", "3"], env={"ZYGOTE_TEST": "yes"}, cwd=tmp_path, timeout=30)
    assert done.returncode == 3
    assert done.stdout == f"argv ['plain', '3'] env yes cwd {tmp_path}\n"
    assert done.stderr == "to stderr\n"


def test_a_kept_descriptor_keeps_its_number_and_a_killed_child_reports_the_signal(script, tmp_path):
    listener = socket.create_server(("127.0.0.1", 0))
    child = zygote().popen([str(script), "serve", str(listener.fileno())], env={}, cwd=tmp_path,
                           keep=(listener.fileno(),), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    with socket.create_connection(listener.getsockname(), timeout=10) as conn:
        assert conn.recv(100) == b"hello from the child"
    listener.close()
    assert child.wait(timeout=10) == 0 and child.poll() == 0

    sleeper = zygote().popen([str(script), "sleep"], env={}, cwd=tmp_path, stdout=subprocess.PIPE)
    assert sleeper.stdout.readline().startswith("argv ['sleep']") and sleeper.stdout.readline() == "sleeping\n"
    assert sleeper.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        sleeper.wait(timeout=0.1)
    sleeper.kill()
    assert sleeper.wait(timeout=10) == -signal.SIGKILL


def test_a_module_runs_as_with_dash_m(tmp_path):
    done = zygote().run(["-m", "platform", "--terse"], env={}, cwd=tmp_path, timeout=30)
    assert done.returncode == 0 and done.stdout.strip()
