"""MCP tools: the per-process cache of each service's tool list, and one tool call with its
failure texts. The runtime offers them to the model through its adapter (runtime/mcp_tool.py)."""
from __future__ import annotations

import asyncio
import json
import threading
from contextlib import AsyncExitStack
from dataclasses import dataclass

from loguru import logger
from mcp import MCPError
from mcp_types import CONNECTION_CLOSED

from agents_app.mcp.connect import (
    exception_text,
    mcp_client_enter,
    mcp_service_fingerprint,
)
from agents_app.mcp.pool import McpUnavailable, mcp_pool
from agents_app.models import McpService

UNAVAILABLE_TEXT = "MCP 服务“{service}”暂时不可用：{reason}"
CALL_TIMEOUT_TEXT = "MCP 工具“{tool}”调用超时（{timeout} 秒）。"
CALL_FAILED_TEXT = "MCP 工具“{tool}”调用失败：{reason}"
IS_ERROR_TEXT = "MCP 工具“{tool}”返回了错误。"
MAX_LIST_PAGES = 20


@dataclass(frozen=True, slots=True)
class McpToolInfo:
    """A tool as the server lists it."""

    name: str
    description: str
    input_schema: dict | None


# service id -> (fingerprint, tools). Plain data, so any loop or thread may read it.
_tool_lists: dict[int, tuple[str, list[McpToolInfo]]] = {}
_tool_lists_lock = threading.Lock()


def mcp_tools_cache_drop(*, service_id: int | None = None) -> None:
    """Forgets the cached tool list of a service (all services when None)."""
    with _tool_lists_lock:
        if service_id is None:
            _tool_lists.clear()
        else:
            _tool_lists.pop(service_id, None)


def _cached(service: McpService) -> list[McpToolInfo] | None:
    entry = _tool_lists.get(service.pk)
    if entry and entry[0] == mcp_service_fingerprint(service):
        return entry[1]
    return None


async def _list_all(client) -> list[McpToolInfo]:
    infos: list[McpToolInfo] = []
    cursor = None
    for _ in range(MAX_LIST_PAGES):
        page = await client.list_tools(cursor=cursor)
        infos += [
            McpToolInfo(name=t.name, description=t.description or t.title or t.name, input_schema=t.input_schema)
            for t in page.tools
        ]
        cursor = page.next_cursor
        if not cursor:
            break
    return infos


async def mcp_service_probe(*, service: McpService) -> list[McpToolInfo]:
    """Lists the tools over a one-off session (admin's "list tools", short-lived loops).

    Raises McpUnavailable with a readable reason."""
    try:
        async with asyncio.timeout(service.timeout_sec):
            async with AsyncExitStack() as stack:
                client = await mcp_client_enter(service=service, stack=stack)
                infos = await _list_all(client)
    except TimeoutError:
        raise McpUnavailable(f"连接超时（{service.timeout_sec} 秒）") from None
    except Exception as exc:
        raise McpUnavailable(exception_text(exc)) from exc
    _remember(service, infos)
    return infos


def _remember(service: McpService, infos: list[McpToolInfo]) -> None:
    with _tool_lists_lock:
        _tool_lists[service.pk] = (mcp_service_fingerprint(service), infos)


async def mcp_service_tool_infos(*, service: McpService, pooled: bool = True) -> list[McpToolInfo]:
    """The service's tools: cached until the service is saved, else listed (pooled session)."""
    cached = _cached(service)
    if cached is not None:
        return cached
    if not pooled:
        return await mcp_service_probe(service=service)
    pool = mcp_pool()
    client = await pool.client(service)
    try:
        async with asyncio.timeout(service.timeout_sec):
            infos = await _list_all(client)
    except Exception as exc:
        pool.discard(service.pk)
        raise McpUnavailable(exception_text(exc)) from exc
    _remember(service, infos)
    logger.info("MCP tools listed service={} count={}", service.name, len(infos))
    return infos


def mcp_result_text(result) -> str:
    """Text parts joined with newlines; other parts are described, not silently dropped."""
    parts: list[str] = []
    for block in result.content:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind in ("image", "audio"):
            label = "图片" if kind == "image" else "音频"
            size = len(block.data) * 3 // 4
            parts.append(f"[{label} {block.mime_type}，约 {size} 字节，未转给模型]")
        elif kind == "resource_link":
            parts.append(f"[资源链接 {block.name}: {block.uri}]")
        elif kind == "resource":
            res = block.resource
            text = getattr(res, "text", None)
            parts.append(text if text is not None else f"[资源 {res.uri}，{res.mime_type or '二进制'}，未转给模型]")
        else:
            parts.append(f"[{kind or '未知'} 内容，未转给模型]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


@dataclass(frozen=True, slots=True)
class McpCallResult:
    """`text` for the model; `error` (failures only) for the student."""

    text: str
    ok: bool = True
    error: str | None = None


async def mcp_tool_call(*, service: McpService, tool: str, args: dict, shown_as: str) -> McpCallResult:
    """Calls `tool` on the service's pooled session within its `timeout_sec`. Never raises for a
    failure the model should read: an unreachable service, a timeout, a broken connection and
    `isError` all come back as a failed result (the texts name the tool `shown_as`, the name the
    model called it by)."""
    timeout = service.timeout_sec
    pool = mcp_pool()
    try:
        async with asyncio.timeout(timeout):
            result = await _call(pool, service, tool, args)
    except McpUnavailable as exc:
        text = UNAVAILABLE_TEXT.format(service=service.name, reason=exc)
        return McpCallResult(text=text, ok=False, error=text)
    except TimeoutError:
        text = CALL_TIMEOUT_TEXT.format(tool=shown_as, timeout=timeout)
        return McpCallResult(text=text, ok=False, error=text)
    except Exception as exc:  # noqa: BLE001 - a broken connection: reopen on the next call
        pool.discard(service.pk)
        text = CALL_FAILED_TEXT.format(tool=shown_as, reason=exception_text(exc))
        logger.warning("MCP call failed service={} tool={} reason={}", service.name, tool, text)
        return McpCallResult(text=text, ok=False, error=text)
    text = mcp_result_text(result)
    if result.is_error:
        return McpCallResult(text=text, ok=False, error=IS_ERROR_TEXT.format(tool=shown_as))
    return McpCallResult(text=text)


async def _call(pool, service: McpService, tool: str, args: dict):
    """One call; if the pooled connection turns out closed (the server process died or the
    HTTP stream ended while idle), reopen the session and send the call once more."""
    client = await pool.client(service)
    try:
        return await client.call_tool(tool, args)
    except MCPError as exc:
        if exc.code != CONNECTION_CLOSED:
            raise
    logger.info("MCP session of {} was closed; reopening", service.name)
    pool.discard(service.pk)
    client = await pool.client(service)
    return await client.call_tool(tool, args)
