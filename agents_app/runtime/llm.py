"""The main agent's model: one reused AsyncOpenAI client per endpoint, one streamed request.

A new client per call costs a TLS handshake and a connection pool each time (seconds under
load), so clients are kept per (endpoint, key, timeout) and per event loop (an httpx pool
belongs to the loop that opened its connections).
"""
from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator

import openai
from django.conf import settings

from campus_agent.request_id import HEADER


def llm_base_url_normalise(url: str) -> str:
    """Strip the trailing `/`, append `/v1` unless the path already ends so (any case)."""
    base = (url or "").strip().rstrip("/")
    return base if base.lower().endswith("/v1") else f"{base}/v1"


_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple, openai.AsyncOpenAI]] = (
    weakref.WeakKeyDictionary()
)


def llm_client() -> openai.AsyncOpenAI:
    """The client for the configured endpoint (settings.LLM_*), created once and reused."""
    key = (llm_base_url_normalise(settings.LLM_BASE_URL), settings.LLM_API_KEY, float(settings.LLM_TIMEOUT))
    per_loop = _clients.setdefault(asyncio.get_running_loop(), {})
    client = per_loop.get(key)
    if client is None:
        client = per_loop[key] = openai.AsyncOpenAI(
            base_url=key[0],
            api_key=key[1] or "not-set",
            timeout=key[2],
            # No SDK retries: a failing model is answered by the fallback at once, and a retried
            # stream could repeat text the user already saw.
            max_retries=0,
        )
    return client


async def llm_stream(*, model: str, messages: list[dict], tools: list[dict] | None, temperature: float,
                     request_id: str) -> AsyncIterator:
    """Opens one streamed chat completion; yields the SDK's chunks (usage in the last one)."""
    kwargs = {}
    if tools:
        kwargs = {"tools": tools, "tool_choice": "auto"}
    stream = await llm_client().chat.completions.create(
        model=model,
        messages=messages,
        temperature=temperature,
        max_tokens=settings.LLM_MAX_TOKENS,
        stream=True,
        stream_options={"include_usage": True},
        extra_headers={HEADER: request_id},
        **kwargs,
    )
    return stream
