"""Run an ASGI app on a loopback port in a background thread, for tests and benchmarks.

uvicorn serves it for real (sockets, chunked streaming, disconnects), so clients under test
see exactly what they would see in production. Port 0: the OS picks a free port.
"""
import asyncio
import threading
import time
from typing import Self

import uvicorn


class ThreadedAsgiServer:
    """`with ThreadedAsgiServer(app) as server:` serves `app` at `server.url` until the block ends
    (or call start() / stop())."""

    def __init__(self, app, *, host: str = "127.0.0.1", port: int = 0, lifespan: str = "off"):
        self.config = uvicorn.Config(
            app, host=host, port=port, lifespan=lifespan, log_config=None, access_log=False,
            timeout_graceful_shutdown=1,
        )
        self.server = uvicorn.Server(self.config)
        self._thread = threading.Thread(target=self._run, name="asgi-test-server", daemon=True)
        self.host = host
        self.port: int | None = None

    def _run(self) -> None:
        asyncio.run(self.server.serve())

    def start(self, timeout: float = 10.0) -> "ThreadedAsgiServer":
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("test ASGI server did not start")
            time.sleep(0.01)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        return self

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=5)

    def __enter__(self) -> "ThreadedAsgiServer":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()


class ServedApp:
    """Base of the test doubles built around one ASGI app (the scripted model, the contract
    sub-agent, the HTTP MCP servers): `serve()` runs `self.app` on loopback, `stop()` ends it,
    and `with Double() as double:` does both."""

    app = None
    lifespan = "off"
    _server: ThreadedAsgiServer | None = None

    def serve(self) -> Self:
        self._server = ThreadedAsgiServer(self.app, lifespan=self.lifespan).start()
        return self

    def stop(self) -> None:
        if self._server:
            self._server.stop()

    @property
    def root_url(self) -> str:
        """http://127.0.0.1:<port>, the server's origin."""
        return self._server.url

    @property
    def port(self) -> int:
        return self._server.port

    def __enter__(self) -> Self:
        return self.serve()

    def __exit__(self, *exc_info) -> None:
        self.stop()
