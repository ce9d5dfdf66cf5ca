"""MCP sessions kept open and reused across turns: one per service per process (event loop), and
for a service each student authorizes with their own account (oauth.py), one per service and
student.

The SDK's transports are anyio context managers that must be entered and exited in the same
task, so each session has an owner task that enters the client, parks until told to close,
and exits it. Requests (list_tools, call_tool) are made from the turns' own tasks over the
session's streams, which is safe from any task.

A session is replaced when the service was saved since it opened (fingerprint differs), when
its owner task ended (the server process died, the HTTP stream closed), or when a request
failed on a broken connection; the replacement opens on the next use.
"""
from __future__ import annotations

import asyncio
import weakref
from contextlib import AsyncExitStack

from loguru import logger
from mcp import Client

from agents_app.mcp.connect import (
    exception_in,
    exception_text,
    mcp_client_enter,
    mcp_http_status_watch,
    mcp_service_fingerprint,
)
from agents_app.mcp.notifications import (
    elicitation_answer,
    server_log_callback,
    server_message_handler,
    tool_list_watch,
)
from agents_app.mcp.oauth import McpAuthorizationRequired, oauth_required, session_auth
from agents_app.mcp.oauth_origins import McpOAuthRefused
from agents_app.models import McpService

# After a failed open, the service is left out at once for this long instead of making every
# turn wait up to its timeout again (a saved config change retries immediately).
OPEN_RETRY_SEC = 15.0
# A session nobody used for this long is closed (its stdio server exits) the next time the pool
# is used: a service disabled, deleted or taken off every agent leaves no process behind.
IDLE_CLOSE_SEC = 600.0


# The opening of a per-student service for a student who has not authorized it yet.
AUTHORIZATION_REASON = "需要学生先授权（连接自己的账号）"
NO_STUDENT_REASON = "需要登录的学生授权，这次对话没有学生账号"


class McpUnavailable(Exception):
    """The service could not be reached (open failed or timed out). `str()` is the reason for
    staff and the log (it may hold the SDK's text); `status` the HTTP error status the server
    answered the opening with, when it did (a 401 is the server answering, not an outage);
    `authorization_url`: not None when what is missing is a student's authorization of a
    per-student service (oauth.py): the page where the student gives it, empty when there is no
    student to ask; `oauth_refused`: its OAuth flow wanted to go where it may not (oauth_origins.py),
    which staff must fix."""

    def __init__(self, reason: str, *, status: int | None = None, authorization_url: str | None = None,
                 oauth_refused: bool = False):
        super().__init__(reason)
        self.status = status
        self.authorization_url = authorization_url
        self.oauth_refused = oauth_refused


SessionKey = tuple[int, int | None]


def session_key(service: McpService, user_id: int | None) -> SessionKey:
    """Whose session it is: the service's, or for a per-student service the student's."""
    return service.pk, (user_id if oauth_required(service) else None)


class PooledSession:
    def __init__(self, service: McpService, user_id: int | None = None):
        self.key = session_key(service, user_id)
        self.name = service.name
        self.fingerprint = mcp_service_fingerprint(service)
        self.broken = False
        self.last_used = asyncio.get_running_loop().time()
        self._ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        self._close = asyncio.Event()
        self._task = asyncio.create_task(self._own(service, self.key[1]), name=f"mcp-session-{service.name}")

    async def _own(self, service: McpService, user_id: int | None) -> None:
        with mcp_http_status_watch() as seen:  # the HTTP answers to the opening (this task's context)
            try:
                async with AsyncExitStack() as stack:
                    client = await mcp_client_enter(service=service, stack=stack, auth=session_auth(service, user_id),
                                                    logging_callback=server_log_callback(service),
                                                    message_handler=server_message_handler(service),
                                                    elicitation_callback=elicitation_answer)
                    self._ready.set_result(client)
                    logger.info("MCP session opened service={} protocol={} revision={}", service.name,
                                service.protocol, client.protocol_version)
                    watch = asyncio.create_task(tool_list_watch(client=client, service=service),
                                                name=f"mcp-tool-list-{service.name}")
                    try:
                        await self._close.wait()
                    finally:
                        watch.cancel()  # before the client exits: its stream belongs to the session
                        await asyncio.gather(watch, return_exceptions=True)
            except asyncio.CancelledError:
                if not self._ready.done():
                    self._ready.cancel()
                raise
            except BaseException as exc:  # noqa: BLE001 - the SDK raises groups; keep the reason for callers
                needed = exception_in(exc, McpAuthorizationRequired)
                refused = exception_in(exc, McpOAuthRefused)
                if needed is not None:
                    failure = McpUnavailable(AUTHORIZATION_REASON, status=401,
                                             authorization_url=needed.authorization_url)
                elif refused is not None:
                    failure = McpUnavailable(str(refused), oauth_refused=True)
                else:
                    failure = McpUnavailable(exception_text(exc), status=seen.status)
                if not self._ready.done():
                    self._ready.set_exception(failure)
                # A student who has not authorized yet is the flow working, not a failing service.
                level = "INFO" if failure.authorization_url is not None else "WARNING"
                logger.log(level, "MCP session ended service={} reason={} http_status={}", self.name, failure,
                           failure.status)
            finally:
                self.broken = True

    @property
    def alive(self) -> bool:
        return not self.broken and not self._task.done()

    async def client(self, timeout: float) -> Client:
        try:
            return await asyncio.wait_for(asyncio.shield(self._ready), timeout)
        except TimeoutError:
            self._task.cancel()
            raise McpUnavailable(f"连接超时（{timeout:g} 秒）") from None

    async def close(self) -> None:
        self._close.set()
        if not self._ready.done():
            self._task.cancel()
        try:
            await asyncio.wait_for(asyncio.shield(self._task), 10)
        except (TimeoutError, asyncio.CancelledError, Exception):  # noqa: BLE001 - closing is best effort
            self._task.cancel()


class McpPool:
    """The sessions of one event loop, by service id (and student, for a per-student service)."""

    def __init__(self):
        self._sessions: dict[SessionKey, PooledSession] = {}
        self._closing: set[asyncio.Task] = set()
        self._failed: dict[SessionKey, tuple[str, float, McpUnavailable]] = {}  # key -> (fingerprint, retry at, why)
        self._lock = asyncio.Lock()

    async def client(self, service: McpService, user_id: int | None = None) -> Client:
        """A connected client for the service (as `user_id`, for a per-student service), opening
        (or replacing) its session if needed."""
        key = session_key(service, user_id)
        if oauth_required(service) and user_id is None:
            # Only a signed-in student can authorize: an API key or the demo has no account there.
            raise McpUnavailable(NO_STUDENT_REASON, status=401, authorization_url="")
        fingerprint = mcp_service_fingerprint(service)
        now = asyncio.get_running_loop().time()
        failed = self._failed.get(key)
        if failed and failed[0] == fingerprint and failed[1] > now and failed[2].authorization_url is None:
            raise McpUnavailable(f"{failed[2]}（{failed[1] - now:.0f} 秒后重试连接）", status=failed[2].status,
                                 oauth_refused=failed[2].oauth_refused)
        async with self._lock:
            for idle in [k for k, s in self._sessions.items() if k != key and now - s.last_used > IDLE_CLOSE_SEC]:
                logger.info("MCP session idle for {}s, closing service={}", IDLE_CLOSE_SEC, self._sessions[idle].name)
                self._retire(idle)
            session = self._sessions.get(key)
            if session is not None and (not session.alive or session.fingerprint != fingerprint):
                self._retire(key)
                session = None
            if session is None:
                session = PooledSession(service, user_id)
                self._sessions[key] = session
            session.last_used = now
        try:
            client = await session.client(float(service.timeout_sec))
        except McpUnavailable as exc:
            session.broken = True
            self._failed[key] = (fingerprint, asyncio.get_running_loop().time() + OPEN_RETRY_SEC, exc)
            raise
        self._failed.pop(key, None)
        return client

    def _retire(self, key: SessionKey) -> None:
        session = self._sessions.pop(key)
        closing = asyncio.create_task(session.close())  # the turn does not wait for it
        self._closing.add(closing)  # a task nobody references may be collected mid-way
        closing.add_done_callback(self._closing.discard)

    def discard(self, service: McpService, user_id: int | None = None) -> None:
        """Marks the session broken: the next use opens a new one."""
        session = self._sessions.get(session_key(service, user_id))
        if session is not None:
            session.broken = True

    async def retired_wait(self) -> None:
        """Waits until the sessions retired so far are closed (their stdio servers have exited)."""
        await asyncio.gather(*self._closing, return_exceptions=True)

    async def close(self) -> None:
        sessions, self._sessions = list(self._sessions.values()), {}
        await asyncio.gather(*(s.close() for s in sessions), *self._closing, return_exceptions=True)

    def __len__(self) -> int:
        return len(self._sessions)


_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, McpPool] = weakref.WeakKeyDictionary()


def mcp_pool() -> McpPool:
    """This process's pool (per event loop: a session's streams belong to the loop that made them)."""
    loop = asyncio.get_running_loop()
    pool = _pools.get(loop)
    if pool is None:
        pool = _pools[loop] = McpPool()
    return pool


async def mcp_pool_close() -> None:
    """Closes every session of the running loop (tests, shutdown); stdio servers exit."""
    pool = _pools.pop(asyncio.get_running_loop(), None)
    if pool is not None:
        await pool.close()
