"""The demo's stdio MCP server stops quietly (issue 42): started as the gateway's MCP pool starts it
(the registered config through agents_app.mcp.connect.stdio_parameters, the mcp SDK's minimal
environment), then told to stop as the pool and a Ctrl-C tell it — its pipes closed, or SIGINT
first. Nothing reaches the server's terminal: no BrokenPipeError or KeyboardInterrupt traceback."""
import json
import signal
import subprocess

import pytest
from mcp.client.stdio import get_default_environment

from agents_app.mcp.connect import stdio_parameters
from demo_app.catalog import demo_mcp_config

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "pool", "version": "1"}}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
LIST_TOOLS = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}


def _started() -> subprocess.Popen:
    params = stdio_parameters(demo_mcp_config())
    child = subprocess.Popen([params.command, *params.args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, cwd=params.cwd, env={**get_default_environment(), **params.env})
    _send(child, INITIALIZE)
    assert json.loads(child.stdout.readline())["id"] == 1  # serving
    _send(child, INITIALIZED)
    return child


def _send(child: subprocess.Popen, message: dict) -> None:
    child.stdin.write(json.dumps(message).encode() + b"\n")
    child.stdin.flush()


def _stderr_at_exit(child: subprocess.Popen) -> str:
    child.wait(timeout=20)
    return child.stderr.read().decode()


@pytest.mark.parametrize("how", ["pipes closed", "stdout gone while it answers", "ctrl-c, then pipes closed"])
def test_the_demo_mcp_child_stops_without_a_traceback(how):
    child = _started()
    try:
        if how == "stdout gone while it answers":
            child.stdout.close()
            _send(child, LIST_TOOLS)  # its answer meets a closed pipe
        elif how == "ctrl-c, then pipes closed":
            child.send_signal(signal.SIGINT)
        child.stdin.close()
        if not child.stdout.closed:
            child.stdout.close()
        stderr = _stderr_at_exit(child)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stderr.close()
    assert "Traceback" not in stderr and "Error" not in stderr, stderr
    assert child.returncode == 0
