"""Embeddings from an OpenAI-compatible `POST /v1/embeddings` (docs/knowledge.md#vectors-optional):
DashScope's text-embedding-v4, bge-m3 behind vLLM or TEI, any server of that shape.

What comes back is checked before anything uses it: one vector per text, in the texts' order, each
of EMBEDDINGS_DIMENSIONS finite numbers, not all zero; an answer late, past its byte cap, not JSON
or of another shape is an `EmbeddingsError` whose message (in Chinese: staff read it as a
document's failure) says which. The texts are students' questions and the documents' passages:
nothing here logs them or puts them into an error.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

import httpx
from django.conf import settings
from loguru import logger

from campus_agent.base.loop_clients import capped_client_new
from knowledge_app.provider_http import (
    ProviderError,
    ProviderWords,
    answer_post,
    error_of,
    finite,
    json_read,
    loop_clients,
)

# An answer's byte cap: the JSON of `count` vectors of `dimensions` floats (≈ 20 bytes each as
# servers print them) with room to spare, plus the envelope (usage, model, object names).
ANSWER_BYTES_PER_NUMBER = 32
ANSWER_ENVELOPE_BYTES = 64 * 1024

MSG_TIMEOUT = "向量模型 {seconds:g} 秒内没有答完"
MSG_CONNECT = "无法连接向量模型"
MSG_HTTP_ERROR = "连接向量模型出错（{name}）"
MSG_STATUS = "向量模型回答 HTTP {status}"
MSG_TOO_LARGE = "向量模型的回答超过 {size} KB"
MSG_NOT_JSON = "向量模型的回答不是 JSON"
MSG_NO_DATA = "向量模型的回答里没有 data 列表"
MSG_COUNT = "向量模型为 {asked} 段文字答了 {answered} 个向量"
MSG_ITEM = "向量模型回答的第 {n} 项没有 embedding 数组"
MSG_INDEX = "向量模型回答的 index 不是 0 到 {last} 各一次"
MSG_DIMENSIONS = "向量模型答的向量是 {got} 维，设置的是 {expected} 维（EMBEDDINGS_DIMENSIONS）"
MSG_NUMBER = "向量模型回答的第 {n} 个向量里有不是有限数的值"
MSG_ZERO = "向量模型回答的第 {n} 个向量全是 0"
MSG_TEXT = "要向量化的第 {n} 段不是非空文字"


class EmbeddingsError(ProviderError):
    """The embeddings service failed or answered something unusable; the message says which."""


WORDS = ProviderWords(error=EmbeddingsError, timeout=MSG_TIMEOUT, connect=MSG_CONNECT, http_error=MSG_HTTP_ERROR,
                      status=MSG_STATUS, too_large=MSG_TOO_LARGE, not_json=MSG_NOT_JSON)


@dataclass(frozen=True)
class EmbeddingsConfig:
    base_url: str  # ends in /v1
    model: str
    dimensions: int
    api_key: str = ""
    send_dimensions: bool = False
    timeout_sec: float = 30.0
    batch_size: int = 10

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/embeddings"

    def answer_max_bytes(self, count: int) -> int:
        return ANSWER_ENVELOPE_BYTES + count * self.dimensions * ANSWER_BYTES_PER_NUMBER


def embeddings_config() -> EmbeddingsConfig | None:
    """The configured provider (EMBEDDINGS_* settings), None when embeddings are off."""
    if not settings.EMBEDDINGS_BASE_URL:
        return None
    return EmbeddingsConfig(
        base_url=settings.EMBEDDINGS_BASE_URL, model=settings.EMBEDDINGS_MODEL,
        dimensions=settings.EMBEDDINGS_DIMENSIONS, api_key=settings.EMBEDDINGS_API_KEY,
        send_dimensions=settings.EMBEDDINGS_SEND_DIMENSIONS, timeout_sec=settings.EMBEDDINGS_TIMEOUT_SEC,
        batch_size=settings.EMBEDDINGS_BATCH_SIZE,
    )


def embeddings_create(*, texts: Sequence[str], config: EmbeddingsConfig | None = None) -> list[list[float]]:
    """One vector per text, in order, from the provider (`config`, else the settings'), asked
    EMBEDDINGS_BATCH_SIZE texts at a time, each request within its timeout. For sync code (the
    indexer's thread); raises EmbeddingsError, or ValueError when embeddings are off."""
    config = _config_or_settings(config)

    async def run() -> list[list[float]]:
        async with capped_client_new() as client:
            return await _batches_embed(client, config, texts)

    return asyncio.run(run())


async def aembeddings_create(*, texts: Sequence[str], config: EmbeddingsConfig | None = None) -> list[list[float]]:
    """See embeddings_create(); for the event loop (a question's embedding), on a client kept
    per loop."""
    return await _batches_embed(loop_clients.get(), _config_or_settings(config), texts)


def _config_or_settings(config: EmbeddingsConfig | None) -> EmbeddingsConfig:
    config = config or embeddings_config()
    if config is None:
        raise ValueError("embeddings are off (EMBEDDINGS_BASE_URL is empty)")
    return config


async def _batches_embed(client: httpx.AsyncClient, config: EmbeddingsConfig, texts: Sequence[str]) -> list[list[float]]:
    for n, text in enumerate(texts, 1):
        if not isinstance(text, str) or not text.strip():
            raise EmbeddingsError(MSG_TEXT.format(n=n))
    vectors: list[list[float]] = []
    for start in range(0, len(texts), config.batch_size):
        batch = list(texts[start:start + config.batch_size])
        started = time.monotonic()
        try:
            async with asyncio.timeout(config.timeout_sec):  # the whole request: connect, send, every read
                body = await _ask(client, config, batch)
            vectors.extend(vectors_read(body, count=len(batch), dimensions=config.dimensions))
        except Exception as exc:
            error = error_of(exc, words=WORDS, timeout_sec=config.timeout_sec)
            # Counts and the reason only: the texts are students' questions and documents' passages.
            logger.warning("embeddings {} failed on {} text(s) after {:.3f}s: {}", config.model, len(batch),
                           time.monotonic() - started, error)
            raise error from exc
        logger.debug("embeddings {}: {} text(s) in {:.3f}s", config.model, len(batch), time.monotonic() - started)
    return vectors


async def _ask(client: httpx.AsyncClient, config: EmbeddingsConfig, batch: list[str]) -> bytes:
    body: dict = {"model": config.model, "input": batch, "encoding_format": "float"}
    if config.send_dimensions:
        body["dimensions"] = config.dimensions
    return await answer_post(client, url=config.url, body=body, api_key=config.api_key,
                             cap=config.answer_max_bytes(len(batch)), words=WORDS)


def vectors_read(body: bytes, *, count: int, dimensions: int) -> list[list[float]]:
    """The `count` vectors of an embeddings answer, in the inputs' order (by `index` when every item
    has one). Raises EmbeddingsError when it is not JSON, has another count, another length, a
    value that is not a finite number (NaN, Infinity, a string, true) or a vector of zeros."""
    answer = json_read(body, words=WORDS)
    data = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(data, list):
        raise EmbeddingsError(MSG_NO_DATA)
    if len(data) != count:
        raise EmbeddingsError(MSG_COUNT.format(asked=count, answered=len(data)))
    for n, item in enumerate(data, 1):
        if not isinstance(item, dict) or not isinstance(item.get("embedding"), list):
            raise EmbeddingsError(MSG_ITEM.format(n=n))
    indexes = [item.get("index") for item in data]
    if all(type(index) is int for index in indexes):
        if sorted(indexes) != list(range(count)):
            raise EmbeddingsError(MSG_INDEX.format(last=count - 1))
        data = sorted(data, key=lambda item: item["index"])
    elif any(index is not None for index in indexes):
        raise EmbeddingsError(MSG_INDEX.format(last=count - 1))
    vectors = []
    for n, item in enumerate(data, 1):
        vector = item["embedding"]
        if len(vector) != dimensions:
            raise EmbeddingsError(MSG_DIMENSIONS.format(got=len(vector), expected=dimensions))
        if not all(finite(x) for x in vector):
            raise EmbeddingsError(MSG_NUMBER.format(n=n))
        if not any(vector):
            raise EmbeddingsError(MSG_ZERO.format(n=n))
        vectors.append([float(x) for x in vector])
    return vectors
