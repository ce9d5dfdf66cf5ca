"""The admin's health check of a sub-agent: `GET {base_url}/healthz` answers 200; for an A2A
sub-agent, its Agent Card can be read and called.

The contract (docs/design.md#sub-agents) fixes only the chat endpoint, and calling it would cost the sub-agent a
real answer (its own model call), so the check asks the conventional `/healthz` path instead
and says plainly what it saw: healthy, reachable but not healthy, or not reachable at all. A2A
has no health endpoint; its card is what every call reads first.
"""
import time
from dataclasses import dataclass

import httpx

from subagents_app.a2a_card import AgentCardError, agent_card_fetch
from subagents_app.models import SubAgent

HEALTH_PATH = "/healthz"
HEALTH_TIMEOUT_MAX_SEC = 5.0
HEALTHY_TEXT = "子 Agent {name}：正常（HTTP 200，{ms:.0f} ms）"
UNHEALTHY_TEXT = "子 Agent {name}：可以连接，但 {path} 返回 HTTP {status}"
UNREACHABLE_TEXT = "子 Agent {name}：无法连接（{reason}）"
CARD_OK_TEXT = "子 Agent {name}：Agent Card 正常（{card}，{streaming}，{ms:.0f} ms）"
CARD_UNUSABLE_TEXT = "子 Agent {name}：Agent Card 可以读取，但{problem}"
CARD_FAILED_TEXT = "子 Agent {name}：{reason}"


@dataclass(frozen=True, slots=True)
class HealthResult:
    ok: bool
    text: str


def subagent_health_check(*, sub_agent: SubAgent) -> HealthResult:
    if sub_agent.is_a2a:
        return _card_check(sub_agent)
    url = sub_agent.base_url.rstrip("/") + HEALTH_PATH
    timeout = min(float(sub_agent.timeout_sec), HEALTH_TIMEOUT_MAX_SEC)
    started = time.perf_counter()
    try:
        response = httpx.get(url, timeout=timeout, follow_redirects=False)
    except httpx.TimeoutException:
        return HealthResult(False, UNREACHABLE_TEXT.format(name=sub_agent.name, reason=f"{timeout:.0f} 秒内无响应"))
    except httpx.HTTPError as exc:
        return HealthResult(False, UNREACHABLE_TEXT.format(name=sub_agent.name, reason=type(exc).__name__))
    if response.status_code == 200:
        ms = (time.perf_counter() - started) * 1000
        return HealthResult(True, HEALTHY_TEXT.format(name=sub_agent.name, ms=ms))
    return HealthResult(
        False, UNHEALTHY_TEXT.format(name=sub_agent.name, path=HEALTH_PATH, status=response.status_code)
    )


def _card_check(sub_agent: SubAgent) -> HealthResult:
    timeout = min(float(sub_agent.timeout_sec), HEALTH_TIMEOUT_MAX_SEC)
    started = time.perf_counter()
    try:
        info = agent_card_fetch(base_url=sub_agent.base_url, timeout=timeout)
    except AgentCardError as exc:
        return HealthResult(False, CARD_FAILED_TEXT.format(name=sub_agent.name, reason=exc.message))
    if info.problem:
        return HealthResult(False, CARD_UNUSABLE_TEXT.format(name=sub_agent.name, problem=info.problem))
    ms = (time.perf_counter() - started) * 1000
    streaming = "支持流式" if info.streaming else "不支持流式"
    return HealthResult(True, CARD_OK_TEXT.format(name=sub_agent.name, card=info.name or "无名称", streaming=streaming,
                                                  ms=ms))
