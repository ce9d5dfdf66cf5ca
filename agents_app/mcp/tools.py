"""MCP tools: each service's tool list (cached in tool_cache.py), and one tool call with its
failure texts and the server's progress. The runtime offers them to the model through its adapter (runtime/mcp_tool.py).

Each service has a circuit breaker (campus_agent/base/circuit.py): the pooled listing and the runtime's
calls go through it, so a service that keeps failing is refused at once for a cool-down instead
of costing every turn its timeout.
"""
from __future__ import annotations

import asyncio
import dataclasses
import json
import tempfile
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field

import httpx
import httpx2
from django.conf import settings
from django.utils.translation import gettext_lazy as _
from loguru import logger
from mcp import MCPError
from mcp_types import CONNECTION_CLOSED, INTERNAL_ERROR, PARSE_ERROR
from pydantic import ValidationError

from agents_app.mcp.connect import (
    exception_in,
    exception_text,
    mcp_client_enter,
    mcp_http_status_watch,
    mcp_request_meta,
    stderr_tail,
)
from agents_app.mcp.notifications import mcp_call_in_flight
from agents_app.mcp.oauth import oauth_required
from agents_app.mcp.pool import McpUnavailable, mcp_pool
from agents_app.mcp.results import OUTPUT_INVALID_TEXT, mcp_result_parts, output_invalid_reason
from agents_app.mcp.tool_cache import (
    McpToolInfo,
    McpToolList,
    mcp_tools_cached,
    mcp_tools_generation,
    mcp_tools_remember,
)
from agents_app.models import McpService
from campus_agent.base.circuit import acircuit_enter, acircuit_failure, acircuit_success, circuit_release
from campus_agent.base.request_id import request_id_get

# For the model (the tool message) — a reason it can act on; the SDK's own words stay in the log.
UNAVAILABLE_TEXT = "MCP 服务“{service}”暂时不可用：{reason}"
CALL_TIMEOUT_TEXT = "MCP 工具“{tool}”调用超时（{timeout} 秒）。"
CALL_FAILED_TEXT = "MCP 工具“{tool}”调用失败：{reason}"
IS_ERROR_TEXT = _("MCP 工具“{tool}”返回了错误。")
CIRCUIT_OPEN_TEXT = _("MCP 服务“{service}”暂时不可用，请稍后再试。")
# The reason, by what the server answered (issue 20): a 4xx is a configuration the server refuses
# (retrying will not help), a 5xx or 429 a server in trouble (later may work).
HTTP_REFUSED_REASON = "服务拒绝了访问（HTTP {status}），多半是密钥或权限配置有误，重试不会成功。"
HTTP_NOT_FOUND_REASON = "服务地址不存在（HTTP {status}），请检查服务配置，重试不会成功。"
HTTP_CLIENT_ERROR_REASON = "服务拒绝了这个请求（HTTP {status}）。"
HTTP_BUSY_REASON = "服务繁忙（HTTP 429），请稍后再试。"
HTTP_SERVER_ERROR_REASON = "服务出错（HTTP {status}），请稍后再试。"
BAD_ANSWER_REASON = "服务的回答无法解析。"
CLOSED_REASON = "与服务的连接已断开。"
SERVER_ERROR_REASON = "服务返回错误：{message}"
NO_CONNECTION_REASON = "无法连接服务。"
OAUTH_REFUSED_REASON = "服务的账号授权指向了不允许访问的地址，网关已拒绝（需要管理员检查它的配置），重试不会成功。"
# For the student: Chinese, names the service, no exception text.
DOWN_NOTICE = _("MCP 服务“{service}”暂时无法使用，请稍后再试。")
REFUSED_NOTICE = _("MCP 服务“{service}”拒绝了访问，请联系管理员检查它的配置。")
AUTHORIZATION_NOTICE = _("MCP 服务“{service}”需要你先连接自己的账号才能使用。")
OAUTH_REFUSED_NOTICE = _("MCP 服务“{service}”的账号授权设置有误，暂时无法使用，请联系管理员。")
CALL_FAILED_NOTICE = _("MCP 工具“{tool}”调用失败，请稍后再试。")
OUTPUT_INVALID_NOTICE = _("MCP 工具“{tool}”返回的结果格式不正确。")
MAX_SERVER_MESSAGE = 300  # characters of a server's JSON-RPC error message the model reads
# A server's `notifications/progress` during a call, one `tool_chunk` line each on the tool's chip.
PROGRESS_TEXT = "{message}（{done}）\n"
PROGRESS_COUNT_TEXT = "进度 {done}\n"
MAX_PROGRESS_MESSAGE = 200  # characters of a progress message
MAX_PROGRESS_LINES = 100  # per call: a server cannot flood the run's event log
MAX_LIST_PAGES = 20
# A tool's name longer than this is no name (the spec's limit); the model sees at most 64 (tool_names.py).
MAX_TOOL_NAME_CHARS = 128
# For staff (the log, admin's list): why a listed tool was left out (docs/runtime.md#caps).
DROPPED_NAME_TEXT = "名称超过 {limit} 个字符"
DROPPED_DESCRIPTION_TEXT = "描述 {size} 字节，超过 MCP_TOOL_DESCRIPTION_MAX_BYTES（{limit}）"
DROPPED_SCHEMA_TEXT = "参数定义 {size} 字节，超过 MCP_TOOL_SCHEMA_MAX_BYTES（{limit}）"
DROPPED_COUNT_TEXT = "另有 {count} 个工具超过数量上限 MCP_TOOLS_MAX（{limit}）{more}"
DROPPED_MORE_PAGES_TEXT = "，后面的分页没有读取"
DROPPED_TOTAL_TEXT = "……共 {count} 条"
MAX_DROPPED_LINES = 20
PER_STUDENT_PROBE_TEXT = ("这个服务由每位学生用自己的账号授权，后台没有学生账号，列不出工具；"
                          "学生在对话中连接账号后，它的工具就会提供给模型")
# A probe may take the whole timeout; past it plus this margin another worker may probe.
PROBE_LEASE_MARGIN_SEC = 5


def mcp_circuit_key(service: McpService) -> str:
    """The service's circuit-breaker source: the row (its creation time keeps a deleted row's
    state from reaching a new row that reuses the id)."""
    return f"mcp:{service.pk}:{service.created_at.timestamp():.6f}"


def _status_of(exc: BaseException) -> int | None:
    """The HTTP status an HTTP transport failed with, looking through exception groups and causes."""
    found = exception_in(exc, httpx.HTTPStatusError | httpx2.HTTPStatusError)
    return found.response.status_code if found is not None else None


def _client_error(status: int | None) -> bool:
    return status is not None and 400 <= status < 500 and status != 429


def mcp_source_failed(exc: BaseException, status: int | None = None) -> bool:
    """Whether a failed call or listing counts against the service's breaker: a timeout, a
    connection that could not open or broke, a 5xx or 429. The server answering with a JSON-RPC
    error, or an HTTP 4xx (a wrong key or URL staff must fix), shows it is up.

    `status`: the HTTP error status seen below the SDK (mcp_http_status_watch); mcp 2.3 turns a
    non-2xx answer into a plain MCPError, which alone would read as the server answering."""
    status = status if status is not None else _status_of(exc)
    if isinstance(exc, McpUnavailable):
        if exc.oauth_refused:  # a setting staff must fix, like a 4xx: the server is not down
            return False
        return not _client_error(status if status is not None else exc.status)
    if status is not None:
        return not _client_error(status)
    if isinstance(exc, ValidationError):  # the server answered, with a result the SDK refuses
        return False
    return not (isinstance(exc, MCPError) and exc.code != CONNECTION_CLOSED)


def mcp_failure_reason(exc: BaseException, status: int | None = None) -> str:
    """What the model reads about a failed call (Chinese; the SDK's text stays in the log)."""
    if isinstance(exc, McpUnavailable) and exc.authorization_url is not None:
        return f"{exc}。"  # a student's authorization is missing: not a configuration error
    if isinstance(exc, McpUnavailable) and exc.oauth_refused:
        return OAUTH_REFUSED_REASON  # the refused URL is for staff (the log), not the model
    status = status if status is not None else _status_of(exc)
    if isinstance(exc, McpUnavailable) and status is None:
        status = exc.status
    if status is not None:
        if status in (401, 403):
            return HTTP_REFUSED_REASON.format(status=status)
        if status == 404:
            return HTTP_NOT_FOUND_REASON.format(status=status)
        if status == 429:
            return HTTP_BUSY_REASON
        if status >= 500:
            return HTTP_SERVER_ERROR_REASON.format(status=status)
        return HTTP_CLIENT_ERROR_REASON.format(status=status)
    if isinstance(exc, ValidationError):
        # The SDK parses a result against the negotiated revision's schema and raises this for one
        # that breaks it (mcp 2.3 on 2026-07-28: a result without `resultType`, SEP-2322).
        return BAD_ANSWER_REASON
    if isinstance(exc, MCPError):
        if exc.code == CONNECTION_CLOSED:
            return CLOSED_REASON
        if exc.code == PARSE_ERROR:
            return BAD_ANSWER_REASON
        if exc.code == INTERNAL_ERROR and exc.message == "Server returned an error response":
            return HTTP_SERVER_ERROR_REASON.format(status="?")
        message = " ".join(str(exc.message).split())[:MAX_SERVER_MESSAGE]  # the server's own words
        return SERVER_ERROR_REASON.format(message=message or exc.code)
    return NO_CONNECTION_REASON


def mcp_failure_notice(*, service: McpService, exc: BaseException, status: int | None = None) -> str:
    """What the student reads about a failed call: whether to wait, to tell staff, or to connect
    their own account."""
    if isinstance(exc, McpUnavailable) and exc.authorization_url is not None:
        return AUTHORIZATION_NOTICE.format(service=service.label)
    if isinstance(exc, McpUnavailable) and exc.oauth_refused:
        return OAUTH_REFUSED_NOTICE.format(service=service.label)
    status = status if status is not None else _status_of(exc)
    if isinstance(exc, McpUnavailable) and status is None:
        status = exc.status
    return (REFUSED_NOTICE if _client_error(status) else DOWN_NOTICE).format(service=service.label)


async def _list_all(client, service: McpService) -> McpToolList:
    """The server's tools, within the caps on what it may list (docs/runtime.md#caps): a tool
    whose name, description or input schema is over its cap is left out, and so is every tool
    past MCP_TOOLS_MAX (no further page is read); the rest of the list still serves. What was left
    out is logged and kept on the list (`dropped`) for admin's check."""
    most = max(int(settings.MCP_TOOLS_MAX), 1)
    infos, dropped, beyond = McpToolList(), [], 0
    cursor = None
    for _page in range(MAX_LIST_PAGES):
        page = await client.list_tools(cursor=cursor)
        for tool in page.tools:
            reason = _over_cap(tool)
            if reason is not None:
                dropped.append(f"{tool.name[:64]!r}：{reason}")  # repr: a name may hold a newline
            elif len(infos) >= most:
                beyond += 1
            else:
                infos.append(McpToolInfo(
                    name=tool.name, description=tool.description or _title(tool) or tool.name,
                    input_schema=tool.input_schema, title=_title(tool), read_only=_hint(tool, "read_only_hint"),
                    destructive=_hint(tool, "destructive_hint")))
        cursor = page.next_cursor
        if not cursor or beyond:
            break
    if beyond:
        more = DROPPED_MORE_PAGES_TEXT if cursor else ""
        dropped.append(DROPPED_COUNT_TEXT.format(count=beyond, limit=most, more=more))
    if dropped:
        shown = dropped[:MAX_DROPPED_LINES]
        if len(dropped) > MAX_DROPPED_LINES:
            shown.append(DROPPED_TOTAL_TEXT.format(count=len(dropped)))
        infos.dropped = tuple(shown)
        logger.warning("MCP tools over the caps left out service={} kept={} dropped={}", service.name, len(infos),
                       "；".join(shown))
    return infos


def _over_cap(tool) -> str | None:
    """Why a listed tool is over a cap (the text for staff), else None."""
    if len(tool.name) > MAX_TOOL_NAME_CHARS:
        return DROPPED_NAME_TEXT.format(limit=MAX_TOOL_NAME_CHARS)
    limit = max(int(settings.MCP_TOOL_DESCRIPTION_MAX_BYTES), 1)
    size = len((tool.description or "").encode("utf-8", "surrogatepass"))
    if size > limit:
        return DROPPED_DESCRIPTION_TEXT.format(size=size, limit=limit)
    limit = max(int(settings.MCP_TOOL_SCHEMA_MAX_BYTES), 1)
    size = len(json.dumps(tool.input_schema, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass"))
    if size > limit:
        return DROPPED_SCHEMA_TEXT.format(size=size, limit=limit)
    return None


def _hint(tool, name: str) -> bool | None:
    """An annotation the server set (the SDK's field names: readOnlyHint is `read_only_hint`)."""
    value = getattr(tool.annotations, name, None) if tool.annotations else None
    return value if isinstance(value, bool) else None


def _title(tool) -> str | None:
    # The spec's display-name precedence: `title`, then `annotations.title`, then `name`.
    title = tool.title or (tool.annotations.title if tool.annotations else None)
    return title.strip()[:40] or None if title else None


async def mcp_service_probe(*, service: McpService) -> McpToolList:
    """Lists the tools over a one-off session (admin's "list tools", short-lived loops).

    Raises McpUnavailable with a readable reason: for a stdio server, with the tail of what it
    wrote to stderr (a traceback, "No module named mcp" …), which "Connection closed" alone hides.
    A service each student authorizes with their own account has no session without a student:
    the list a student's session got, if this process has one, else the reason."""
    if oauth_required(service):
        cached = mcp_tools_cached(service)
        if cached is None:
            raise McpUnavailable(PER_STUDENT_PROBE_TEXT, status=401, authorization_url="")
        return cached
    generation = mcp_tools_generation(service.pk)
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as errlog:
        try:
            async with asyncio.timeout(service.timeout_sec):
                async with AsyncExitStack() as stack:
                    client = await mcp_client_enter(service=service, stack=stack, errlog=errlog)
                    infos = await _list_all(client, service)
        except TimeoutError:
            raise McpUnavailable(_with_stderr(f"连接超时（{service.timeout_sec} 秒）", errlog)) from None
        except Exception as exc:
            raise McpUnavailable(_with_stderr(exception_text(exc), errlog)) from exc
    mcp_tools_remember(service, infos, generation=generation)
    return infos


def _with_stderr(reason: str, errlog) -> str:
    tail = stderr_tail(errlog)
    return f"{reason}；服务进程的错误输出：{tail}" if tail else reason


async def mcp_service_tool_infos(*, service: McpService, pooled: bool = True,
                                 user_id: int | None = None) -> McpToolList:
    """The service's tools: cached until the service is saved, else listed (pooled session; for a
    per-student service the student `user_id`'s: the list is the server's, shared by all)."""
    cached = mcp_tools_cached(service)
    if cached is not None:
        return cached
    if not pooled:
        return await mcp_service_probe(service=service)
    ticket = await acircuit_enter(source=mcp_circuit_key(service), name=f"MCP service {service.name}",
                                  lease_sec=service.timeout_sec + PROBE_LEASE_MARGIN_SEC)
    if ticket is None:
        raise McpUnavailable(CIRCUIT_OPEN_TEXT.format(service=service.label))
    pool = mcp_pool()
    generation = mcp_tools_generation(service.pk)
    try:
        client = await pool.client(service, user_id)
        async with asyncio.timeout(service.timeout_sec):
            infos = await _list_all(client, service)
    except asyncio.CancelledError:
        circuit_release(ticket)  # not awaited: an await here could be cancelled again
        raise
    except McpUnavailable as exc:  # the session could not open
        await _circuit_settle(ticket, exc)
        raise
    except Exception as exc:
        pool.discard(service, user_id)
        await _circuit_settle(ticket, exc)
        raise McpUnavailable(exception_text(exc)) from exc
    await acircuit_success(ticket)
    mcp_tools_remember(service, infos, generation=generation)
    logger.info("MCP tools listed service={} count={}", service.name, len(infos))
    return infos


async def _circuit_settle(ticket, exc: BaseException) -> None:
    if mcp_source_failed(exc):
        await acircuit_failure(ticket, reason=exception_text(exc))
    else:  # the server answered (a 4xx at the opening, a JSON-RPC error): it is up
        await acircuit_success(ticket)


@dataclass(frozen=True, slots=True)
class McpCallResult:
    """`text` for the model; `error` (failures only) for the student; `links` and `images` for
    the page (results.py); `source_failed`: the service is down or failing (its breaker counts it)."""

    text: str
    ok: bool = True
    error: str | None = None
    links: list[dict] = field(default_factory=list)
    images: list[dict] = field(default_factory=list)
    source_failed: bool = False
    authorization_url: str | None = None  # the student must authorize the service there first (oauth.py)


def _failed(text: str, *, source_failed: bool, notice: str | None = None) -> McpCallResult:
    return McpCallResult(text=text, ok=False, error=notice or text, source_failed=source_failed)


def progress_text(progress: float, total: float | None, message: str | None) -> str:
    """A progress notification as one line for the chip: `正在查询图书馆（3/10）`, `进度 3`…"""
    done = f"{progress:g}/{total:g}" if total else f"{progress:g}"
    message = " ".join((message or "").split())[:MAX_PROGRESS_MESSAGE]
    return PROGRESS_TEXT.format(message=message, done=done) if message else PROGRESS_COUNT_TEXT.format(done=done)


def _progress_relay(emit: Callable[[str], Awaitable[None]] | None):
    """The call's `progress_callback`: each new line to `emit`, at most MAX_PROGRESS_LINES."""
    if emit is None:
        return None
    sent = {"lines": 0, "last": None}

    async def relay(progress: float, total: float | None, message: str | None) -> None:
        text = progress_text(progress, total, message)
        if text == sent["last"] or sent["lines"] >= MAX_PROGRESS_LINES:
            return
        sent["lines"] += 1
        sent["last"] = text
        await emit(text)

    return relay


async def mcp_tool_call(*, service: McpService, tool: str, args: dict, shown_as: str,
                        emit: Callable[[str], Awaitable[None]] | None = None,
                        user_id: int | None = None) -> McpCallResult:
    """Calls `tool` on the service's pooled session within its `timeout_sec`. Never raises for a
    failure the model should read: an unreachable service, a timeout, a broken connection,
    structured content that breaks the tool's `outputSchema` and `isError` all come back as a
    failed result (the texts name the tool `shown_as`, the name the model called it by).

    `emit`: gets the server's `notifications/progress` for this call as lines (`progress_text`),
    live, while it runs. `user_id`: the student, whose session a per-student service's call
    uses (oauth.py). No circuit breaker here: the runtime's tool (runtime/mcp_tool.py) wraps
    the call in it."""
    timeout = service.timeout_sec
    pool = mcp_pool()
    with mcp_http_status_watch() as seen:  # the HTTP status below the SDK (connect.py)
        try:
            async with asyncio.timeout(timeout):
                result = await _call(pool, service, tool, args, progress=_progress_relay(emit), user_id=user_id)
        except McpUnavailable as exc:
            logger.warning("MCP service unavailable service={} tool={} reason={} http_status={}", service.name,
                           tool, exc, exc.status)
            failed = _failed(UNAVAILABLE_TEXT.format(service=service.name, reason=mcp_failure_reason(exc)),
                             source_failed=mcp_source_failed(exc), notice=mcp_failure_notice(service=service, exc=exc))
            return dataclasses.replace(failed, authorization_url=exc.authorization_url or None)
        except TimeoutError as exc:
            # A server that answered 4xx to a POST the SSE transport only logs: the call then waits
            # out its timeout, but the server did answer, and it said no.
            if _client_error(seen.status):
                logger.warning("MCP call refused service={} tool={} http_status={}", service.name, tool, seen.status)
                return _failed(CALL_FAILED_TEXT.format(tool=shown_as, reason=mcp_failure_reason(exc, seen.status)),
                               source_failed=False, notice=mcp_failure_notice(service=service, exc=exc,
                                                                              status=seen.status))
            return _failed(CALL_TIMEOUT_TEXT.format(tool=shown_as, timeout=timeout), source_failed=True)
        except Exception as exc:  # noqa: BLE001 - a broken connection: reopen on the next call
            invalid = output_invalid_reason(exc)
            if invalid is not None:  # the server answered, wrongly: the session is fine
                text = OUTPUT_INVALID_TEXT.format(tool=shown_as, reason=invalid)
                logger.warning("MCP result broke its outputSchema service={} tool={} reason={}", service.name, tool,
                               invalid)
                return _failed(text, source_failed=False, notice=OUTPUT_INVALID_NOTICE.format(tool=shown_as))
            source_failed = mcp_source_failed(exc, seen.status)
            if source_failed:
                pool.discard(service, user_id)
            text = CALL_FAILED_TEXT.format(tool=shown_as, reason=mcp_failure_reason(exc, seen.status))
            logger.warning("MCP call failed service={} tool={} reason={} http_status={}", service.name, tool,
                           exception_text(exc), seen.status)
            return _failed(text, source_failed=source_failed,
                           notice=mcp_failure_notice(service=service, exc=exc, status=seen.status))
    parts = mcp_result_parts(result, trusted=service.trusted)
    if result.is_error:
        return McpCallResult(text=parts.text, ok=False, error=IS_ERROR_TEXT.format(tool=shown_as))
    return McpCallResult(text=parts.text, links=parts.links, images=parts.images)


async def _call(pool, service: McpService, tool: str, args: dict, *, progress=None, user_id: int | None = None):
    """One call; if the pooled connection turns out closed (the server process died or the
    HTTP stream ended while idle), reopen the session and send the call once more."""
    meta = mcp_request_meta()  # the turn's request id, per call: the session is shared
    with mcp_call_in_flight(service_id=service.pk, request_id=request_id_get()):  # whose log it is
        client = await pool.client(service, user_id)
        try:
            return await client.call_tool(tool, args, progress_callback=progress, meta=meta)
        except MCPError as exc:
            if exc.code != CONNECTION_CLOSED:
                raise
        logger.info("MCP session of {} was closed; reopening", service.name)
        pool.discard(service, user_id)
        client = await pool.client(service, user_id)
        return await client.call_tool(tool, args, progress_callback=progress, meta=meta)
