"""The sub-agent SSE client (docs/design.md#sub-agents): one call, one stream, one deadline, no retry.

Every failure becomes a `SubAgentReply` with two texts: `text`, the contract's exact wording (docs/design.md#sub-agents) with the
reason (`调用子 Agent 失败: All connection attempts failed`), which the caller (the agent
runtime's `call_<name>` tool) hands to the model; and `notice`, a sentence in Chinese for the
student that names the service but no exception (the reason is logged for staff).
"""
from __future__ import annotations

import asyncio
import json
import re
import time
import weakref
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass, replace

import httpx
from django.utils.translation import gettext_lazy as _
from loguru import logger

from campus_agent.base.errors import CAMPUS_TOKEN_EXPIRED, DOWNSTREAM, SUBAGENT_INTERNAL
from campus_agent.base.redaction import clip_text, mask_token
from campus_agent.base.tracing import trace_headers_add
from subagents_app.limits import StreamCaps, StreamCut, cut_marker, sse_events
from subagents_app.models import SubAgent

TIMEOUT_TEXT = "子 Agent 响应超时，请稍后重试。"
CONNECT_FAILED_TEXT = "调用子 Agent 失败: {reason}"
HTTP_ERROR_TEXT = "子 Agent 返回错误（{status}），请稍后重试。"
ERROR_EVENT_TEXT = "子 Agent 返回错误: {message}"
EMPTY_ANSWER_TEXT = "子 Agent 没有返回内容。"

# What the student reads (tool_result.error, the error frame, a keyword-routing answer).
TIMEOUT_NOTICE = _("「{label}」服务响应超时，请稍后再试。")
CONNECT_FAILED_NOTICE = _("暂时无法连接「{label}」服务，请稍后再试。")
HTTP_ERROR_NOTICE = _("「{label}」服务暂时出错，请稍后再试。")
ERROR_EVENT_NOTICE = _("「{label}」服务暂时无法回答，请稍后再试。")
TOKEN_EXPIRED_NOTICE = _("校园账号登录已过期，请重新登录校园账号后再试。")  # as the page says for 40102

CHAT_PATH = "/api/v1/chat"
NOT_SSE_REASON = "子 Agent 的回答不是事件流（Content-Type: {content_type}）"
ERROR_MESSAGE_MAX_CHARS = 500  # an `error` frame's message, as the model reads it
MAX_INT_DIGITS = 30

ChunkCallback = Callable[[str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class SubAgentReply:
    """What one call produced. `text` is the answer when ok, else the contract's failure text (for the
    model); `notice` is the student's sentence when not ok."""

    ok: bool
    text: str
    chart: dict | None = None
    code: int | None = None  # 40102 / 50001 / 50003 when not ok
    notice: str | None = None
    status: int | None = None  # the HTTP status when it was not 200
    cut: str | None = None  # why the answer was cut at a cap (subagents_app/limits.py); the text says so
    # An A2A agent asks the student something (`input-required`): {"message", "task_id",
    # "context_id"}; the student's answer continues that task (a2a_client.py).
    asks: dict | None = None

    @property
    def source_failed(self) -> bool:
        """The sub-agent itself is down or failing (timeout, connection error, 5xx, 429): what
        its circuit breaker counts. An answer it gave, even an `error` event (40102 included) or
        another 4xx, shows it is up."""
        if self.ok:
            return False
        if self.status is not None:
            return self.status >= 500 or self.status == 429
        return self.code == DOWNSTREAM


def subagent_label(sub_agent: SubAgent) -> str:
    """How a student-facing sentence names the sub-agent: the display name staff set, else the
    head of its description ("食堂助手（演示）") when short, else its name."""
    return sub_agent.label


def subagent_circuit_key(sub_agent: SubAgent) -> str:
    """The sub-agent's circuit-breaker source (campus_agent/base/circuit.py): the row, not its name,
    which staff may change; its creation time keeps a deleted row's state from reaching a new
    row that reuses the id."""
    return f"subagent:{sub_agent.pk}:{sub_agent.created_at.timestamp():.6f}"


def _error_code(raw) -> int:
    """40102 when the sub-agent says the campus token expired, as a number or as a string
    ("40102", as the seed's sub-agents send it); any other code, or none, or garbage is 50001."""
    if isinstance(raw, str):
        raw = raw.strip()
        return CAMPUS_TOKEN_EXPIRED if raw == str(CAMPUS_TOKEN_EXPIRED) else SUBAGENT_INTERNAL
    if isinstance(raw, int | float) and not isinstance(raw, bool) and raw == CAMPUS_TOKEN_EXPIRED:
        return CAMPUS_TOKEN_EXPIRED
    return SUBAGENT_INTERNAL


class LoopHttpClients:
    """One shared httpx client per event loop: a pool is bound to the loop that opened its
    connections, and the gateway has one loop per worker process (tests have one per test). No
    httpx timeout: each call's own deadline covers connect and the whole stream."""

    def __init__(self, *, wrap: Callable[[httpx.AsyncBaseTransport], httpx.AsyncBaseTransport] | None = None) -> None:
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
            weakref.WeakKeyDictionary()
        )
        self._wrap = wrap  # e.g. limits.CappedTransport, for a client whose body reading we do not own

    def get(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None or client.is_closed:
            transport = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_connections=200, max_keepalive_connections=50))
            # identity: a compressed body would be inflated past every cap before it is counted
            client = httpx.AsyncClient(timeout=httpx.Timeout(None), follow_redirects=False,
                                       headers={"Accept-Encoding": "identity"},
                                       transport=self._wrap(transport) if self._wrap else transport)
            self._clients[loop] = client
        return client

    async def close(self) -> None:
        """Closes this loop's client (tests, shutdown)."""
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()


_clients = LoopHttpClients()


async def subagent_client_close() -> None:
    """Closes this loop's shared client (tests, shutdown)."""
    await _clients.close()


def subagent_chat_url(base_url: str) -> str:
    return base_url.rstrip("/") + CHAT_PATH


def _headers(*, request_id: str, conversation_id: str, campus_token: str | None) -> dict[str, str]:
    headers = {"Accept": "text/event-stream", "Accept-Encoding": "identity", "Cache-Control": "no-store",
               "X-Parent-Conversation-Id": conversation_id}
    trace_headers_add(headers, request_id=request_id)  # X-Request-Id, and traceparent while tracing
    if campus_token:
        headers["Authorization"] = f"Bearer {campus_token}"
    return headers


def _json_int(digits: str):
    # Python refuses integers over 4,300 digits (ValueError), which would drop the whole frame: an
    # `error` frame with such a `code` is still an error (50001), and no figure needs that many.
    return int(digits) if len(digits) <= MAX_INT_DIGITS else None


def _decode(data: str) -> dict | None:
    """A frame's JSON object, or None for what cannot be decoded (ignored, as the contract allows)."""
    try:
        payload = json.loads(data, parse_int=_json_int)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than Python parses
        return None
    return payload if isinstance(payload, dict) else None


# Terminal control sequences (ANSI CSI / OSC) and C0 controls other than tab and line ends: no
# answer needs them, and they garble the page and any terminal that shows a log.
_CONTROL = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def text_cut(text: str, limit: int) -> str:
    """`text` cut to `limit` characters (line ends kept, unlike the log's clip_text)."""
    return text if len(text) <= limit else text[:limit] + "…"


def subagent_text_clean(text: str) -> str:
    """A sub-agent's text without terminal escapes and control characters."""
    return _CONTROL.sub("", text) if _CONTROL.search(text) else text


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
    logger.debug(
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
        reply = SubAgentReply(ok=False, text=TIMEOUT_TEXT, code=DOWNSTREAM, notice=TIMEOUT_NOTICE)
    except (httpx.HTTPError, OSError) as exc:
        reason = str(exc) or type(exc).__name__
        reply = SubAgentReply(ok=False, text=CONNECT_FAILED_TEXT.format(reason=reason), code=DOWNSTREAM,
                              notice=CONNECT_FAILED_NOTICE)
    if reply.notice:
        reply = replace(reply, notice=reply.notice.format(label=subagent_label(sub_agent)))
    # One INFO line per turn (chat_app.runs.turn_log names the failed tools); the reason of a
    # failure is a warning, as an MCP call's is.
    logger.log(
        "DEBUG" if reply.ok else "WARNING", "sub-agent done name={} ok={} code={} cost_ms={:.0f}{}",
        sub_agent.name, reply.ok, reply.code, (time.perf_counter() - started) * 1000,
        "" if reply.ok else f" failure={clip_text(reply.text, 200)}",  # the reason the student is not shown
    )
    return reply


async def _call(*, sub_agent: SubAgent, body: dict, headers: dict, on_chunk: ChunkCallback | None) -> SubAgentReply:
    url = subagent_chat_url(sub_agent.base_url)
    caps = StreamCaps.subagent()
    async with _clients.get().stream("POST", url, json=body, headers=headers) as response:
        status = response.status_code
        if status != 200:
            return SubAgentReply(ok=False, text=HTTP_ERROR_TEXT.format(status=status), code=SUBAGENT_INTERNAL,
                                 notice=HTTP_ERROR_NOTICE, status=status)
        content_type = response.headers.get("content-type", "").partition(";")[0].strip().lower()
        if content_type != "text/event-stream":
            return SubAgentReply(ok=False, text=CONNECT_FAILED_TEXT.format(reason=NOT_SSE_REASON.format(
                content_type=clip_text(content_type, 60) or "无")), code=DOWNSTREAM, notice=CONNECT_FAILED_NOTICE)
        reading = _Reading(on_chunk)
        # Raw bytes (we ask for no compression): the caps count what came over the wire.
        chunks = response.aiter_raw() if _identity(response) else response.aiter_bytes()
        try:
            async with aclosing(sse_events(chunks, caps=caps)) as events:
                async for _, data in events:
                    if await reading.take(data):
                        break
        except StreamCut as cut:
            return await reading.cut(cut)
    return reading.reply()


def _identity(response: httpx.Response) -> bool:
    return response.headers.get("content-encoding", "identity").strip().lower() in ("", "identity")


class _Reading:
    """What one call's frames said so far; `kept` counts the answer text held (for the marker)."""

    def __init__(self, on_chunk: ChunkCallback | None):
        self.on_chunk = on_chunk
        self.parts: list[str] = []
        self.kept = 0
        self.full_text: str | None = None
        self.chart: dict | None = None
        self.error: dict | None = None

    async def take(self, data: str) -> bool:
        """Reads one frame's data; True once the answer is over (`done` or `error`)."""
        payload = _decode(data)
        if payload is None:
            return False
        kind = payload.get("type")
        if kind == "chunk":
            content = payload.get("content")
            if isinstance(content, str) and content:
                content = subagent_text_clean(content)
                if content:
                    self.parts.append(content)
                    self.kept += len(content)
                    if self.on_chunk is not None:
                        await self.on_chunk(content)
        elif kind == "error":
            self.error = payload
            return True  # its `done` adds nothing, and a sub-agent that then hangs must not hide it
        elif kind == "done":
            if isinstance(payload.get("full_text"), str):
                self.full_text = subagent_text_clean(payload["full_text"])
            if isinstance(payload.get("chart"), dict):
                self.chart = payload["chart"]
            return True
        return False

    async def cut(self, cut: StreamCut) -> SubAgentReply:
        """A cap was reached: the text so far and the marker; the student is shown the marker too."""
        marker = cut_marker(reason=cut.reason, kept=self.kept)
        if self.on_chunk is not None:
            await self.on_chunk(marker.lstrip("\n") if not self.parts else marker)
        text = "".join(self.parts) + marker
        return SubAgentReply(ok=True, text=text.lstrip("\n"), cut=cut.reason)

    def reply(self) -> SubAgentReply:
        if self.error is not None:
            code = _error_code(self.error.get("code"))
            raw = self.error.get("message")
            message = text_cut(subagent_text_clean(raw), ERROR_MESSAGE_MAX_CHARS) if isinstance(raw, str) else ""
            notice = TOKEN_EXPIRED_NOTICE if code == CAMPUS_TOKEN_EXPIRED else ERROR_EVENT_NOTICE
            return SubAgentReply(ok=False, text=ERROR_EVENT_TEXT.format(message=message.strip() or "未知错误"),
                                 code=code, notice=notice)
        text = self.full_text if self.full_text else "".join(self.parts)
        return SubAgentReply(ok=True, text=text or EMPTY_ANSWER_TEXT, chart=self.chart)
