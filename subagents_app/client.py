"""The sub-agent SSE client (DESIGN §5): one call, one stream, one deadline, no retry.

Every failure becomes a `SubAgentReply` whose `text` is the exact §5 wording, so the caller
(the agent runtime's `call_<name>` tool) hands it to the model and the user unchanged.
"""
from __future__ import annotations

import asyncio
import json
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx
from httpx_sse import aconnect_sse
from loguru import logger

from campus_agent.errors import CAMPUS_TOKEN_EXPIRED, DOWNSTREAM, SUBAGENT_INTERNAL
from campus_agent.redaction import clip_text, mask_token
from subagents_app.models import SubAgent

TIMEOUT_TEXT = "子 Agent 响应超时，请稍后重试。"
CONNECT_FAILED_TEXT = "调用子 Agent 失败: {reason}"
HTTP_ERROR_TEXT = "子 Agent 返回错误（{status}），请稍后重试。"
ERROR_EVENT_TEXT = "子 Agent 返回错误: {message}"
EMPTY_ANSWER_TEXT = "子 Agent 没有返回内容。"

CHAT_PATH = "/api/v1/chat"

ChunkCallback = Callable[[str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class SubAgentReply:
    """What one call produced. `text` is the answer when ok, else the §5 failure text."""

    ok: bool
    text: str
    chart: dict | None = None
    code: int | None = None  # 40102 / 50001 / 50003 when not ok


# One client per event loop: an httpx pool is bound to the loop that opened its connections,
# and the gateway has one loop per worker process (tests have one per test).
_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = weakref.WeakKeyDictionary()


def _http_client() -> httpx.AsyncClient:
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None or client.is_closed:
        # No httpx timeout: the caller's single deadline covers connect + the whole stream.
        client = httpx.AsyncClient(timeout=httpx.Timeout(None), follow_redirects=False,
                                   limits=httpx.Limits(max_connections=200, max_keepalive_connections=50))
        _clients[loop] = client
    return client


async def subagent_client_close() -> None:
    """Closes this loop's shared client (tests, shutdown)."""
    client = _clients.pop(asyncio.get_running_loop(), None)
    if client is not None:
        await client.aclose()


def subagent_chat_url(base_url: str) -> str:
    return base_url.rstrip("/") + CHAT_PATH


def _headers(*, request_id: str, conversation_id: str, campus_token: str | None) -> dict[str, str]:
    headers = {
        "Accept": "text/event-stream",
        "X-Request-Id": request_id,
        "X-Parent-Conversation-Id": conversation_id,
    }
    if campus_token:
        headers["Authorization"] = f"Bearer {campus_token}"
    return headers


def _decode(data: str) -> dict | None:
    """A frame's JSON object, or None for what cannot be decoded (ignored per §5)."""
    try:
        payload = json.loads(data)
    except ValueError:
        return None
    return payload if isinstance(payload, dict) else None


async def subagent_call(
    *,
    sub_agent: SubAgent,
    message: str,
    request_id: str,
    conversation_id: str,
    campus_token: str | None,
    on_chunk: ChunkCallback | None = None,
) -> SubAgentReply:
    """POSTs `message` to the sub-agent and reads its SSE answer within `timeout_sec` overall.

    `on_chunk` receives each text chunk as it arrives (forwarded live to the user). No retry:
    a retried stream would show the user two half answers.
    """
    started = time.perf_counter()
    logger.info(
        "sub-agent call name={} message={} token={}", sub_agent.name, clip_text(message), mask_token(campus_token)
    )
    try:
        async with asyncio.timeout(sub_agent.timeout_sec):
            reply = await _call(
                sub_agent=sub_agent,
                body={"message": message, "domain": sub_agent.domain},
                headers=_headers(request_id=request_id, conversation_id=conversation_id, campus_token=campus_token),
                on_chunk=on_chunk,
            )
    except TimeoutError:
        reply = SubAgentReply(ok=False, text=TIMEOUT_TEXT, code=DOWNSTREAM)
    except (httpx.HTTPError, OSError) as exc:
        reason = str(exc) or type(exc).__name__
        reply = SubAgentReply(ok=False, text=CONNECT_FAILED_TEXT.format(reason=reason), code=DOWNSTREAM)
    logger.info(
        "sub-agent done name={} ok={} code={} cost_ms={:.0f}",
        sub_agent.name, reply.ok, reply.code, (time.perf_counter() - started) * 1000,
    )
    return reply


async def _call(*, sub_agent: SubAgent, body: dict, headers: dict, on_chunk: ChunkCallback | None) -> SubAgentReply:
    url = subagent_chat_url(sub_agent.base_url)
    async with aconnect_sse(_http_client(), "POST", url, json=body, headers=headers) as source:
        status = source.response.status_code
        if status != 200:
            return SubAgentReply(ok=False, text=HTTP_ERROR_TEXT.format(status=status), code=SUBAGENT_INTERNAL)
        parts: list[str] = []
        full_text: str | None = None
        chart: dict | None = None
        error: dict | None = None
        # aiter_sse checks the content type; a 200 that is not an event stream is a failure
        # to call the sub-agent (httpx_sse.SSEError is an httpx.TransportError).
        async for event in source.aiter_sse():
            payload = _decode(event.data)
            if payload is None:
                continue
            kind = payload.get("type")
            if kind == "chunk":
                content = payload.get("content")
                if isinstance(content, str) and content:
                    parts.append(content)
                    if on_chunk is not None:
                        await on_chunk(content)
            elif kind == "error":
                error = payload
                break  # its `done` adds nothing, and a sub-agent that then hangs must not hide it
            elif kind == "done":
                if isinstance(payload.get("full_text"), str):
                    full_text = payload["full_text"]
                if isinstance(payload.get("chart"), dict):
                    chart = payload["chart"]
                break
    if error is not None:
        code = error.get("code") if isinstance(error.get("code"), int) else SUBAGENT_INTERNAL
        if code != CAMPUS_TOKEN_EXPIRED:
            code = SUBAGENT_INTERNAL
        message = str(error.get("message") or "未知错误")
        return SubAgentReply(ok=False, text=ERROR_EVENT_TEXT.format(message=message), code=code)
    text = full_text if full_text else "".join(parts)
    return SubAgentReply(ok=True, text=text or EMPTY_ANSWER_TEXT, chart=chart)
