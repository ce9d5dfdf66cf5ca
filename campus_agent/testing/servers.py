"""Run an ASGI app on a loopback port in a background thread, for tests and benchmarks.

uvicorn serves it for real (sockets, chunked streaming, disconnects), so clients under test
see exactly what they would see in production. Port 0: the OS picks a free port.
"""
import asyncio
import threading
import time

import uvicorn


class ThreadedAsgiServer:
    def __init__(self, app, *, host: str = "127.0.0.1", port: int = 0):
        self.config = uvicorn.Config(
            app, host=host, port=port, lifespan="off", log_config=None, access_log=False, timeout_graceful_shutdown=1
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
