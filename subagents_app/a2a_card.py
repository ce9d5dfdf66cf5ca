"""An A2A agent's Agent Card: fetched with a deadline and a size limit, read into what the gateway
uses (where to call, streaming, bearer auth) and what admin shows (name, description, skills).

    info = agent_card_fetch(base_url=..., timeout=5)          # admin, health check (sync)
    info = await aagent_card_fetch(base_url=..., headers=...) # a call (async, cached briefly)

Every failure raises `AgentCardError` with a sentence staff can act on (unreachable, HTTP status,
too large, not JSON, not a card); nothing about a card can make admin answer 500.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx
from a2a.client.card_resolver import parse_agent_card
from a2a.types.a2a_pb2 import AgentCard
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH, TransportProtocol

CARD_MAX_BYTES = 256 * 1024  # a real card is a few kB; a bigger one is refused unread
CARD_CACHE_SEC = 60.0  # a call reuses a card this long: one fetch per minute, not per question
DESCRIPTION_MAX_CHARS = 2000
SKILLS_SHOWN = 20

UNREACHABLE_TEXT = "无法获取 Agent Card（{reason}）"
STATUS_TEXT = "获取 Agent Card 时服务返回 HTTP {status}"
TOO_LARGE_TEXT = f"Agent Card 超过 {CARD_MAX_BYTES // 1024} KB，已拒绝读取"
NOT_JSON_TEXT = "Agent Card 不是合法的 JSON"
NOT_CARD_TEXT = "Agent Card 的内容不符合 A2A 规范（{reason}）"
NO_JSONRPC_TEXT = "Agent Card 没有声明 JSON-RPC 接口（本网关只支持 JSON-RPC 绑定）"
FOREIGN_URL_TEXT = "Agent Card 声明的调用地址 {url} 与登记的服务地址不同源，网关不会把学生的请求发往别处"


class AgentCardError(Exception):
    """A card that cannot be used; the message says why, in words for staff."""

    def __init__(self, message: str, *, status: int | None = None, unreachable: bool = False):
        super().__init__(message)
        self.message = message
        self.status = status  # the HTTP status when the card endpoint answered with an error
        self.unreachable = unreachable  # connection failure or timeout: the service is down


@dataclass(frozen=True, slots=True)
class SkillInfo:
    name: str
    description: str
    examples: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class AgentCardInfo:
    """What the gateway reads from a card. `card` is the SDK's parsed card (for its client);
    `rpc_url` the JSON-RPC interface it calls; `problem` why it cannot be called (still shown)."""

    card: AgentCard
    name: str
    description: str
    skills: list[SkillInfo]
    streaming: bool
    bearer: bool
    rpc_url: str | None
    problem: str | None

    @property
    def callable(self) -> bool:
        return self.problem is None


def agent_card_url(base_url: str) -> str:
    return base_url.rstrip("/") + AGENT_CARD_WELL_KNOWN_PATH


def _origin(url: str) -> tuple[str, str, int | None] | None:
    try:
        parts = urlsplit(url)
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:  # a port out of range, a broken IPv6 literal: no origin to match
        return None
    return parts.scheme, (parts.hostname or "").lower(), port


def _declares_bearer(card: AgentCard) -> bool:
    """The card asks for an HTTP bearer credential (`securitySchemes: {…: {httpAuthSecurityScheme:
    {scheme: "Bearer"}}}`, or the 0.3 form `{type: "http", scheme: "bearer"}`)."""
    return any(
        scheme.HasField("http_auth_security_scheme")
        and scheme.http_auth_security_scheme.scheme.strip().lower() == "bearer"
        for scheme in card.security_schemes.values()
    )


def _rpc_interface(card: AgentCard, base_url: str) -> tuple[str | None, str | None]:
    """(the JSON-RPC URL to call, None) or (None, why it cannot be called). Keeps in `card` only
    the interfaces the gateway may call, so a2a-sdk's client cannot pick another."""
    jsonrpc = [i for i in card.supported_interfaces if i.protocol_binding == TransportProtocol.JSONRPC]
    if not jsonrpc:
        return None, NO_JSONRPC_TEXT
    # The campus token goes where the card says: only the origin a superuser registered may get it.
    wanted = _origin(base_url)
    usable = [i for i in jsonrpc if wanted is not None and _origin(i.url) == wanted and wanted[0] in ("http", "https")]
    if not usable:
        return None, FOREIGN_URL_TEXT.format(url=jsonrpc[0].url[:200])
    del card.supported_interfaces[:]
    card.supported_interfaces.extend(usable)
    return usable[0].url, None


def agent_card_parse(*, body: bytes, base_url: str) -> AgentCardInfo:
    """Reads a fetched card body; raises AgentCardError for what is not a usable card."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested deeper than Python parses
        raise AgentCardError(NOT_JSON_TEXT) from exc
    if not isinstance(data, dict):
        raise AgentCardError(NOT_CARD_TEXT.format(reason="顶层须是 JSON 对象"))
    try:
        card = parse_agent_card(data)
    except Exception as exc:  # noqa: BLE001 - protobuf and the SDK's fix-ups raise several kinds
        raise AgentCardError(NOT_CARD_TEXT.format(reason=str(exc)[:200] or type(exc).__name__)) from exc
    rpc_url, problem = _rpc_interface(card, base_url)
    return AgentCardInfo(
        card=card,
        name=card.name,
        description=card.description,
        skills=[SkillInfo(s.name or s.id, s.description, list(s.examples)) for s in card.skills],
        streaming=card.capabilities.streaming,
        bearer=_declares_bearer(card),
        rpc_url=rpc_url,
        problem=problem,
    )


def agent_card_description(info: AgentCardInfo) -> str:
    """The description the model reads, made from the card: what the agent is, then its skills
    with their examples (the trigger words staff would otherwise have to write)."""
    lines = [f"{info.name}：{info.description}".strip("：") if info.name or info.description else ""]
    for skill in info.skills[:SKILLS_SHOWN]:
        line = f"- {skill.name}：{skill.description}".rstrip("：")
        if skill.examples:
            line += "（例如：" + "；".join(skill.examples[:3]) + "）"
        lines.append(line)
    return "\n".join(line for line in lines if line).strip()[:DESCRIPTION_MAX_CHARS]


def _check_status(response: httpx.Response) -> None:
    if response.status_code != 200:
        raise AgentCardError(STATUS_TEXT.format(status=response.status_code), status=response.status_code)
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > CARD_MAX_BYTES:
        raise AgentCardError(TOO_LARGE_TEXT)


def _too_large(received: int) -> None:
    if received > CARD_MAX_BYTES:
        raise AgentCardError(TOO_LARGE_TEXT)


def _unreachable(exc: Exception, timeout: float) -> AgentCardError:
    reason = f"{timeout:.0f} 秒内无响应" if isinstance(exc, httpx.TimeoutException) else (str(exc) or type(exc).__name__)
    return AgentCardError(UNREACHABLE_TEXT.format(reason=reason[:200]), unreachable=True)


def agent_card_fetch(*, base_url: str, timeout: float, headers: dict[str, str] | None = None) -> AgentCardInfo:
    """GETs and reads the card (admin and the health check: sync, no cache)."""
    body = bytearray()
    try:
        with httpx.stream("GET", agent_card_url(base_url), headers=headers, timeout=timeout,
                          follow_redirects=False) as response:
            _check_status(response)
            for piece in response.iter_bytes():
                body += piece
                _too_large(len(body))
    except httpx.HTTPError as exc:
        raise _unreachable(exc, timeout) from exc
    return agent_card_parse(body=bytes(body), base_url=base_url)


async def _afetch(client: httpx.AsyncClient, base_url: str, headers: dict[str, str]) -> AgentCardInfo:
    body = bytearray()
    async with client.stream("GET", agent_card_url(base_url), headers=headers) as response:
        _check_status(response)
        async for piece in response.aiter_bytes():
            body += piece
            _too_large(len(body))
    return agent_card_parse(body=bytes(body), base_url=base_url)


# base_url -> (fetched at, card). Per process; a card changes when its agent is redeployed, and a
# minute's delay before the gateway notices is what saves a round trip on every question.
_cache: dict[str, tuple[float, AgentCardInfo]] = {}


async def aagent_card_fetch(*, client: httpx.AsyncClient, base_url: str, headers: dict[str, str]) -> AgentCardInfo:
    """The card for a call: from the cache when fetched less than CARD_CACHE_SEC ago. The caller's
    deadline bounds the fetch; httpx errors are left to the caller (they are call failures)."""
    hit = _cache.get(base_url)
    now = time.monotonic()
    if hit is not None and now - hit[0] < CARD_CACHE_SEC:
        return hit[1]
    info = await _afetch(client, base_url, headers)
    _cache[base_url] = (now, info)
    return info


def agent_card_cache_clear() -> None:
    """Forgets every cached card (tests; admin after a save)."""
    _cache.clear()

