"""Run an ASGI app on a loopback port in a background thread, for tests and benchmarks.

uvicorn serves it for real (sockets, chunked streaming, disconnects), so clients under test
see exactly what they would see in production. Port 0: the OS picks a free port.

The suite starts its servers once per session and resets them between tests (docs/testing.md):
`ThreadedAsgiServer.tasks_cancel()` ends what a test left running on the server's loop, as a
stop would, and `ServedApp.reset()` puts a test double back as it was when it started serving.
"""
import asyncio
import threading
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Self

import uvicorn

RESET_TIMEOUT_SEC = 15.0


class ThreadedAsgiServer:
    """`with ThreadedAsgiServer(app) as server:` serves `app` at `server.url` until the block ends
    (or call start() / stop())."""

    def __init__(self, app, *, host: str = "127.0.0.1", port: int = 0, lifespan: str = "off",
                 access_log: bool = False):
        self.app = app
        self.config = uvicorn.Config(
            self._guarded, interface="asgi3", host=host, port=port, lifespan=lifespan, log_config=None,
            access_log=access_log, timeout_graceful_shutdown=1,
        )
        self.server = uvicorn.Server(self.config)
        self._thread = threading.Thread(target=self._run, name="asgi-test-server", daemon=True)
        self.host = host
        self.port: int | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._main: asyncio.Task | None = None
        self._cancelled: weakref.WeakSet[asyncio.Task] = weakref.WeakSet()

    async def _guarded(self, scope, receive, send) -> None:
        try:
            await self.app(scope, receive, send)
        except asyncio.CancelledError:
            if asyncio.current_task() not in self._cancelled:
                raise
            # Ended by tasks_cancel() between two tests: quietly, its client is gone (uvicorn
            # closes the connection, or answers 500 if nothing was sent yet).

    def _run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._main = asyncio.current_task()
        await self.server.serve()

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
        # The requests still open (a client's SSE stream, a held answer) are ended first, as a
        # reset would: uvicorn's graceful shutdown would otherwise wait its whole timeout for them.
        if self.loop is not None and self._thread.is_alive() and not self.loop.is_closed():
            try:
                self.tasks_cancel(timeout=2)
            except (RuntimeError, TimeoutError):
                pass  # shutting down anyway: uvicorn cancels what is left after its timeout
        self.server.should_exit = True
        self._thread.join(timeout=5)

    def call(self, make: Callable[[], Awaitable], timeout: float = RESET_TIMEOUT_SEC):
        """Runs the coroutine `make()` on the server's loop and returns its result."""
        return asyncio.run_coroutine_threadsafe(make(), self.loop).result(timeout)

    def tasks_cancel(self, *, everything: bool = False, timeout: float = RESET_TIMEOUT_SEC) -> None:
        """Cancels the requests in flight (with `everything`: every task on the server's loop,
        whatever the app started, such as a project's runs and supervisor) and waits until they
        have ended, as stopping the server would. Raises if some do not end in `timeout`."""
        if everything and self.config.lifespan != "off":
            raise ValueError("`everything` would cancel the app's lifespan task too")

        async def cancel() -> None:
            me = asyncio.current_task()
            if everything:
                tasks = [t for t in asyncio.all_tasks() if t is not me and t is not self._main]
            else:
                tasks = list(self.server.server_state.tasks)
            for task in tasks:
                self._cancelled.add(task)
                task.cancel()
            if tasks:
                _, pending = await asyncio.wait(tasks, timeout=timeout)
                if pending:
                    raise RuntimeError(f"{len(pending)} task(s) of the test server did not end: {pending}")

        self.call(cancel, timeout=timeout + 1)

    def __enter__(self) -> "ThreadedAsgiServer":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()


class ServedApp:
    """Base of the test doubles built around one ASGI app (the scripted model, the contract
    sub-agent, the HTTP MCP servers): `serve()` runs `self.app` on loopback, `stop()` ends it,
    and `with Double() as double:` does both.

    A double served for a whole test session is `reset()` between tests: the requests still in
    flight are cancelled, `_state_init()` makes its records and scripts anew, and every other
    attribute a test may have set (`default_mode`, `chunk_delay` …) is put back to the value it
    had when `serve()` was called; attributes a test added are removed."""

    app = None
    lifespan = "off"
    _server: ThreadedAsgiServer | None = None
    _pristine: dict | None = None

    def _state_init(self) -> None:
        """Makes the per-test state (records, scripts, events); called by the subclass's
        __init__ and by reset()."""

    def serve(self) -> Self:
        self._server = ThreadedAsgiServer(self.app, lifespan=self.lifespan).start()
        self._pristine = dict(vars(self))
        return self

    def stop(self) -> None:
        if self._server:
            self._server.stop()

    def requests_cancel(self) -> None:
        """Ends what the requests still in flight left running (a stalled reply, a stream that
        trickles forever, an A2A task that hangs) and waits for it: nothing goes on into the
        next test."""
        self._server.tasks_cancel(everything=self.lifespan == "off")

    def reset(self) -> None:
        """Back to how it was when it started serving, for the next test."""
        self.requests_cancel()
        attributes = vars(self)
        for name in [name for name in attributes if name not in self._pristine and name != "_pristine"]:
            del attributes[name]
        attributes.update(self._pristine)
        self._state_init()

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
