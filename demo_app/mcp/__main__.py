"""`python -m demo_app.mcp`: serve the demo calendar over stdio.

A stdio server is told to stop by its pipes: the gateway's MCP pool closes them when the server
stops, and a Ctrl-C in the terminal reaches this child too (one process group). Either way it
exits quietly: a BrokenPipeError or a KeyboardInterrupt traceback from the child, printed on the
server's terminal at every stop, reads like a failure (docs/demo.md)."""
import os
import sys

import anyio

from demo_app.mcp.server import server

# How the other end of the pipes, or the terminal, ends the server: not errors. anyio's broken
# or closed stream: stdin's reader handing on a line after the session ended on the Ctrl-C.
STOPPED = (BrokenPipeError, ConnectionResetError, EOFError, KeyboardInterrupt, anyio.BrokenResourceError,
           anyio.ClosedResourceError)


def _stopped(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):  # anyio's task group wraps the pipe's error
        return all(_stopped(inner) for inner in exc.exceptions)
    return isinstance(exc, STOPPED)


def main() -> int:
    try:
        server.run("stdio")
    except BaseException as exc:
        if not _stopped(exc):
            raise
        try:  # stdout is gone: Python's flush at exit would print "Exception ignored … BrokenPipeError"
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
