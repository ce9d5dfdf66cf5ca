"""The admin's health check of a sub-agent: `GET {base_url}/healthz` answers 200.

The contract (DESIGN §5) fixes only the chat endpoint, and calling it would cost the sub-agent a
real answer (its own model call), so the check asks the conventional `/healthz` path instead
and says plainly what it saw: healthy, reachable but not healthy, or not reachable at all.
"""
import time
from dataclasses import dataclass

import httpx

from subagents_app.models import SubAgent

HEALTH_PATH = "/healthz"
HEALTH_TIMEOUT_MAX_SEC = 5.0
HEALTHY_TEXT = "子 Agent {name}：正常（HTTP 200，{ms:.0f} ms）"
UNHEALTHY_TEXT = "子 Agent {name}：可以连接，但 {path} 返回 HTTP {status}"
UNREACHABLE_TEXT = "子 Agent {name}：无法连接（{reason}）"


@dataclass(frozen=True, slots=True)
class HealthResult:
    ok: bool
    text: str


def subagent_health_check(*, sub_agent: SubAgent) -> HealthResult:
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
