"""Which model providers a turn may use, and opening a model stream with retries and fallbacks.

An agent's chain: its own provider (a `Provider` row, or — none chosen — the default provider
from settings.LLM_*) with its model, then its fallback providers in order (`AgentFallback`), each
with its own model; disabled providers are skipped (docs/runtime.md, "Providers").

`provider_stream_open` runs the chain before the first token:

1. Ask the chain's next provider; read its stream up to the first chunk that carries output
   (content, reasoning or a tool call: `_has_output`), keeping what came before it.
2. A 429, a 5xx, a connection error, a timeout, or an error inside the stream before that chunk
   is an outage: try the same provider again after a wait (the answer's `Retry-After` /
   `retry-after-ms`, else LLM_RETRY_BASE_SEC doubled per attempt), at most LLM_RETRIES times,
   and only when the wait is within LLM_RETRY_MAX_WAIT_SEC and ends before the turn's deadline;
   else go to step 1 with the next provider.
3. A 4xx other than 429 is a configuration error (bad key, unknown model): logged at ERROR, not
   retried on that provider; the next provider is tried (the student still gets an answer, staff
   see the error in the log and the trace).
4. The chain exhausted: raise the first configuration error when there was one (the loop reports
   it, as with a single provider), else the last outage (the loop falls back to keyword routing).

Once a chunk with output arrived nothing is retried: the student has seen it.
"""
from __future__ import annotations

import asyncio
import json
import math
from collections import deque
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

import httpx
import openai
from asgiref.sync import sync_to_async
from django.conf import settings
from django.utils import timezone
from loguru import logger

from agents_app.models import Agent, AgentFallback, Provider
from agents_app.runtime.llm import LlmProvider, LlmStream, llm_base_url_normalise, llm_default_provider, llm_stream
from agents_app.runtime.reasoning import delta_reasoning, reasoning_sent_back
from agents_app.runtime.tracing import model_attempt_traced
from campus_agent.base.text import text_clean

NO_PROVIDER_REASON = "no enabled model provider for this agent"
# Chunks kept while waiting for the first one with output; past this the stream counts as begun
# (a hostile answer of endless empty deltas is not held in memory, nor retried).
MAX_BUFFERED_CHUNKS = 64
YIELD_EVERY_SEC = 0.005
YIELD_PAUSE_SEC = 0.001
REASONING_EFFORT_ON = "medium"


class NoProvider(openai.APIConnectionError):
    """The agent's chain has no enabled provider (an outage to the loop: keyword routing)."""

    def __init__(self) -> None:
        super().__init__(message=NO_PROVIDER_REASON, request=None)


@dataclass(frozen=True, slots=True)
class ChainLink:
    """One provider of a chain, with the model asked there, its kind (the thinking switch) and
    whether a tool round's reasoning is sent back to it (runtime/reasoning.py)."""

    provider: LlmProvider
    kind: str
    model: str
    reasoning_back: bool = True


def thinking_options(*, kind: str, thinking: str) -> dict:
    """The request fields that turn a thinking model's thinking on or off, by provider kind.
    `thinking` "" (默认) sends nothing; so does the kind "other".

    - DashScope: `enable_thinking` (a body field of its OpenAI-compatible mode);
    - vLLM: `chat_template_kwargs.enable_thinking` (read by the Qwen3 / DeepSeek chat templates);
    - OpenAI: `reasoning_effort` "medium" when on; off sends nothing (not every reasoning model
      can stop reasoning, and one that cannot refuses the request);
    - Ollama: `reasoning_effort` "medium" / "none" — its /v1 endpoint ignores the native `think`
      field (ollama/ollama#14820, documented by #14821).
    """
    if thinking not in (Agent.Thinking.ON, Agent.Thinking.OFF):
        return {}
    on = thinking == Agent.Thinking.ON
    if kind == Provider.Kind.DASHSCOPE:
        return {"extra_body": {"enable_thinking": on}}
    if kind == Provider.Kind.VLLM:
        return {"extra_body": {"chat_template_kwargs": {"enable_thinking": on}}}
    if kind == Provider.Kind.OPENAI:
        return {"reasoning_effort": REASONING_EFFORT_ON} if on else {}
    if kind == Provider.Kind.OLLAMA:
        return {"reasoning_effort": REASONING_EFFORT_ON if on else "none"}
    return {}


def provider_llm(row: Provider) -> LlmProvider:
    """What a client for `row` is built from (its key decrypted, or read from its variable)."""
    return LlmProvider(name=row.name, base_url=row.base_url, api_key=row.api_key_plain(), timeout=float(row.timeout_sec),
                       slot=f"provider:{row.pk}", version=row.updated_at.isoformat() if row.updated_at else "")


def _chain_rows(agent: Agent) -> tuple[Provider | None, list[AgentFallback]]:
    # Loaded with the turn's catalog (selectors.agent_catalog_load), else read now: an admin edit
    # applies to the next turn either way.
    if hasattr(agent, "fallback_links") and (agent.provider_id is None or Agent.provider.is_cached(agent)):
        return agent.provider, list(agent.fallback_links)
    primary = Provider.objects.filter(pk=agent.provider_id).first() if agent.provider_id else None
    return primary, list(AgentFallback.objects.filter(agent_id=agent.pk).select_related("provider")
                         .order_by("position", "id"))


def provider_chain_sync(agent: Agent) -> list[ChainLink]:
    """The agent's providers in the order they are tried (sync: may read the rows)."""
    primary, fallbacks = _chain_rows(agent)
    chain: list[ChainLink] = []
    if agent.provider_id is None or primary is None:
        if settings.LLM_BASE_URL:
            chain.append(ChainLink(provider=llm_default_provider(), kind=settings.LLM_KIND,
                                   model=agent.model or settings.LLM_MODEL, reasoning_back=settings.LLM_REASONING_BACK))
    elif primary.enabled:
        chain.append(ChainLink(provider=provider_llm(primary), kind=primary.kind,
                               model=agent.model or primary.default_model, reasoning_back=primary.reasoning_back))
    seen = {agent.provider_id} if agent.provider_id is not None else set()
    for link in fallbacks:
        row = link.provider
        if row.pk in seen or not row.enabled:
            continue
        seen.add(row.pk)
        chain.append(ChainLink(provider=provider_llm(row), kind=row.kind, model=link.model or row.default_model,
                               reasoning_back=row.reasoning_back))
    return chain


async def provider_chain(agent: Agent) -> list[ChainLink]:
    """See provider_chain_sync()."""
    if hasattr(agent, "fallback_links") and (agent.provider_id is None or Agent.provider.is_cached(agent)):
        return provider_chain_sync(agent)  # loaded: no query
    return await sync_to_async(provider_chain_sync)(agent)


class ProviderStream:
    """A model stream opened by `provider_stream_open`: the chunks read before the first output
    first, then the rest of the stream; `answered_by` = (provider name, model)."""

    def __init__(self, *, stream: LlmStream, buffered: list[dict], link: ChainLink) -> None:
        self._stream = stream
        self._buffered = deque(buffered)
        self.answered_by = (link.provider.name, link.model)

    def __aiter__(self) -> ProviderStream:
        return self

    async def __anext__(self) -> dict:
        if self._buffered:
            return self._buffered.popleft()
        return await self._stream.__anext__()

    @property
    def received(self) -> int:
        return self._stream.received

    async def close(self) -> None:
        await self._stream.close()


def _has_output(chunk: dict) -> bool:
    choices = chunk.get("choices")
    for choice in choices if isinstance(choices, list) else ():
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if isinstance(delta, dict) and (delta.get("content") or delta.get("tool_calls") or delta_reasoning(delta)):
            return True
    return False


def is_outage(exc: BaseException) -> bool:
    """A failure worth another attempt: 429, 5xx, connection, timeout, an error in the stream.
    A 4xx other than 429 is the provider refusing the request (a configuration error)."""
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code == 429 or exc.status_code >= 500
    return isinstance(exc, openai.APIError | httpx.HTTPError)


def retry_after_sec(exc: BaseException) -> float | None:
    """The wait an answer asks for: `retry-after-ms`, else `Retry-After` in seconds or as an HTTP
    date; None when absent or not a time (garbage, negative, NaN)."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    millis = _seconds(headers.get("retry-after-ms"))
    if millis is not None:
        return millis / 1000
    value = headers.get("retry-after")
    seconds = _seconds(value)
    if seconds is not None or not value:
        return seconds
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when is None or when.tzinfo is None:
        return None
    return max((when - timezone.now()).total_seconds(), 0.0)


def _seconds(value) -> float | None:
    if not isinstance(value, str) or not value.strip() or len(value) > 32:
        return None
    try:
        number = float(value.strip())
    except ValueError:
        return None
    return number if math.isfinite(number) and number >= 0 else None


REASON_MAX_CHARS = 500


def _key_blank(exc: BaseException, key: str) -> None:
    """Blanks `key` in the exception's message, should the provider have echoed it there: the
    loop logs the message, and keyword routing logs it as its reason."""
    if not key or len(key) < 4:
        return
    if any(isinstance(arg, str) and key in arg for arg in exc.args):
        exc.args = tuple(arg.replace(key, "***") if isinstance(arg, str) else arg for arg in exc.args)
    message = getattr(exc, "message", None)
    if isinstance(message, str) and key in message:
        exc.message = message.replace(key, "***")


def _failure_text(exc: BaseException, key: str = "") -> str:
    """What the log and the span say of a failure: the class, the status, the SDK's message (the
    provider's own words, cut), with the key blanked should the provider have echoed it."""
    status = getattr(exc, "status_code", None)
    text = f"{type(exc).__name__}" + (f" HTTP {status}" if status is not None else "") + f": {exc}"
    if key:
        text = text.replace(key, "***")
    return text[:REASON_MAX_CHARS]


async def _open_first(link: ChainLink, *, agent: Agent, messages, tools, temperature, request_id,
                      max_bytes) -> ProviderStream:
    """Opens the stream and reads it up to its first chunk with output (or its end)."""
    messages = reasoning_sent_back(messages, send_back=link.reasoning_back)
    stream = await llm_stream(model=link.model, messages=messages, tools=tools, temperature=temperature,
                              request_id=request_id, max_bytes=max_bytes, provider=link.provider,
                              options=thinking_options(kind=link.kind, thinking=agent.thinking))
    buffered: list[dict] = []
    loop = asyncio.get_running_loop()
    paused_at = loop.time()
    try:
        async for chunk in stream:
            buffered.append(chunk)
            if _has_output(chunk) or len(buffered) >= MAX_BUFFERED_CHUNKS:
                break
            if loop.time() - paused_at > YIELD_EVERY_SEC:  # as loop._model_round: never hold the loop
                await asyncio.sleep(YIELD_PAUSE_SEC)
                paused_at = loop.time()
    except BaseException:
        await stream.close()
        raise
    return ProviderStream(stream=stream, buffered=buffered, link=link)


async def provider_stream_open(*, agent: Agent, messages: list[dict], tools: list[dict] | None, temperature: float,
                               request_id: str, max_bytes: int | None, deadline: float) -> ProviderStream:
    """Opens the turn's model stream through the agent's chain (the algorithm: this module's
    docstring). `deadline` is the turn's (event-loop time): no wait runs past it. Raises what
    the last useful attempt raised (the SDK's errors), NoProvider for an empty chain."""
    chain = await provider_chain(agent)
    if not chain:
        raise NoProvider()
    loop = asyncio.get_running_loop()
    retries = max(int(settings.LLM_RETRIES), 0)
    refused: BaseException | None = None
    last: BaseException | None = None
    for link in chain:
        name = link.provider.name
        base_url = llm_base_url_normalise(link.provider.base_url)
        for attempt in range(1, retries + 2):
            started = loop.time()
            try:
                stream = await _open_first(link, agent=agent, messages=messages, tools=tools,
                                           temperature=temperature, request_id=request_id, max_bytes=max_bytes)
            except (openai.APIError, httpx.HTTPError) as exc:
                elapsed = loop.time() - started
                _key_blank(exc, link.provider.api_key)  # the loop logs it too, and keyword routing
                reason = _failure_text(exc, link.provider.api_key)
                if not is_outage(exc):
                    refused = refused or exc
                    logger.error("model attempt refused provider={!r} model={!r} attempt={} cost_ms={:.0f} "
                                 "reason={!r} (check the provider in admin, or LLM_*, and the agent's model)",
                                 name, link.model, attempt, elapsed * 1000, reason)
                    model_attempt_traced(provider=name, model=link.model, base_url=base_url, attempt=attempt,
                                         outcome=reason)
                    break
                last = exc
                wait = _wait(exc, attempt)
                fits = (attempt <= retries and wait is not None and wait <= settings.LLM_RETRY_MAX_WAIT_SEC
                        and loop.time() + wait < deadline)
                logger.warning("model attempt failed provider={!r} model={!r} attempt={} cost_ms={:.0f} reason={!r} "
                               "next={}", name, link.model, attempt, elapsed * 1000, reason,
                               f"retry in {wait:.2f}s" if fits else "next provider")
                model_attempt_traced(provider=name, model=link.model, base_url=base_url, attempt=attempt,
                                     outcome=reason, wait=wait if fits else None)
                if not fits:
                    break
                await asyncio.sleep(wait)
                continue
            logger.debug("model attempt answered provider={!r} model={!r} attempt={} cost_ms={:.0f}",
                        name, link.model, attempt, (loop.time() - started) * 1000)
            model_attempt_traced(provider=name, model=link.model, base_url=base_url, attempt=attempt,
                                 outcome="ok", answered=True)
            return stream
    raise refused or last


def _wait(exc: BaseException, attempt: int) -> float | None:
    """The wait before attempt `attempt + 1`: what the answer asked for, else exponential backoff."""
    asked = retry_after_sec(exc)
    if asked is not None:
        return asked
    return float(settings.LLM_RETRY_BASE_SEC) * (2 ** (attempt - 1))


# --- the admin's 「测试连接」: GET {base_url}/models ---------------------------------------------
PROBE_MAX_BYTES = 1024 * 1024
PROBE_MAX_MODELS = 50
PROBE_MODEL_ID_CHARS = 100
PROBE_TIMEOUT_TEXT = "“{name}”在 {seconds:g} 秒内没有回答。"
PROBE_CONNECT_TEXT = "无法连接“{name}”：{reason}"
PROBE_REFUSED_TEXT = "“{name}”拒绝了密钥（HTTP {status}），请检查 API 密钥。"
PROBE_STATUS_TEXT = "“{name}”返回了 HTTP {status}，请检查接口地址。"
PROBE_NOT_A_LIST_TEXT = "“{name}”的回答不是模型列表（GET /models），请检查接口地址。"


class ProbeFailed(Exception):
    """The provider could not list its models; the message is for staff, in Chinese, keyless."""


async def provider_models_probe(*, provider: LlmProvider, timeout: float) -> list[str]:
    """The model ids `GET {base_url}/models` lists (the first PROBE_MAX_MODELS), asked with the
    provider's key; raises ProbeFailed. The answer is read up to PROBE_MAX_BYTES and never shown
    as it came: only model ids, cut to PROBE_MODEL_ID_CHARS."""
    name = provider.name
    url = f"{llm_base_url_normalise(provider.base_url)}/models"
    headers = {"Authorization": f"Bearer {provider.api_key}"} if provider.api_key else {}
    body = bytearray()
    try:
        async with httpx.AsyncClient(timeout=timeout, follow_redirects=False) as client:
            async with client.stream("GET", url, headers=headers) as response:
                if response.status_code in (401, 403):
                    raise ProbeFailed(PROBE_REFUSED_TEXT.format(name=name, status=response.status_code))
                if response.status_code != 200:
                    raise ProbeFailed(PROBE_STATUS_TEXT.format(name=name, status=response.status_code))
                async for piece in response.aiter_bytes():
                    body += piece
                    if len(body) > PROBE_MAX_BYTES:
                        raise ProbeFailed(PROBE_NOT_A_LIST_TEXT.format(name=name))
    except httpx.TimeoutException as exc:
        raise ProbeFailed(PROBE_TIMEOUT_TEXT.format(name=name, seconds=timeout)) from exc
    except httpx.HTTPError as exc:
        reason = type(exc).__name__ if not str(exc) else str(exc)[:200]
        raise ProbeFailed(PROBE_CONNECT_TEXT.format(name=name, reason=reason)) from exc
    try:
        data = json.loads(bytes(body))
    except (ValueError, RecursionError) as exc:
        raise ProbeFailed(PROBE_NOT_A_LIST_TEXT.format(name=name)) from exc
    rows = data.get("data") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        raise ProbeFailed(PROBE_NOT_A_LIST_TEXT.format(name=name))
    ids = [text_clean(row["id"])[:PROBE_MODEL_ID_CHARS] for row in rows
           if isinstance(row, dict) and isinstance(row.get("id"), str) and row["id"]]
    return ids[:PROBE_MAX_MODELS]
