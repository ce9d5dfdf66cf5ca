"""A reranker for the knowledge base's search (docs/knowledge.md#reranker-optional): the passages
the indexes found, scored again against the question by a cross-encoder behind the Jina/Cohere
rerank API that vLLM (`/v1/rerank`), DashScope's compatible mode (`/reranks`) and others serve:
`POST {RERANK_BASE_URL}/rerank` with {"model", "query", "documents": [texts], "top_n"}, answered
{"results": [{"index", "relevance_score"}, …]} (a `document` echoed in a result is ignored).

What comes back is checked before it is used: at least `top_n` results and no more than the
documents, each `index` in range and once, each score a finite number; an answer late, past its
byte cap, not JSON or of another shape is a `RerankError` whose message (in Chinese: staff read
it in the log) says which. The search that asked then keeps its own order (knowledge_app.search).
The texts are students' questions and the documents' passages: nothing here logs them or puts
them into an error.
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

# An answer's byte cap: the documents echoed back (a server may return each one's text, escaped as
# \uXXXX: six bytes for a Chinese character's three), a result's envelope each, and room to spare.
ANSWER_ENVELOPE_BYTES = 64 * 1024
ANSWER_BYTES_PER_RESULT = 256
CANDIDATES_MAX = 100  # RERANK_CANDIDATES' ceiling (settings.py): the documents one request sends

MSG_TIMEOUT = "重排模型 {seconds:g} 秒内没有答完"
MSG_CONNECT = "无法连接重排模型"
MSG_HTTP_ERROR = "连接重排模型出错（{name}）"
MSG_STATUS = "重排模型回答 HTTP {status}"
MSG_TOO_LARGE = "重排模型的回答超过 {size} KB"
MSG_NOT_JSON = "重排模型的回答不是 JSON"
MSG_NO_RESULTS = "重排模型的回答里没有 results 列表"
MSG_COUNT = "重排模型为 {asked} 段文字答了 {answered} 个结果，应在 {least} 到 {asked} 个之间"
MSG_ITEM = "重排模型回答的第 {n} 项没有整数 index 和 relevance_score"
MSG_INDEX = "重排模型回答的第 {n} 项的 index {index} 不在 0 到 {last} 之间或重复"
MSG_NUMBER = "重排模型回答的第 {n} 项的 relevance_score 不是有限数"
MSG_TEXT = "要重排的第 {n} 段不是非空文字"
MSG_QUERY = "要重排的问题是空的"


class RerankError(ProviderError):
    """The reranker failed or answered something unusable; the message says which."""


WORDS = ProviderWords(error=RerankError, timeout=MSG_TIMEOUT, connect=MSG_CONNECT, http_error=MSG_HTTP_ERROR,
                      status=MSG_STATUS, too_large=MSG_TOO_LARGE, not_json=MSG_NOT_JSON)


@dataclass(frozen=True)
class RerankConfig:
    base_url: str  # ends in /v1, or is the endpoint itself (…/rerank, DashScope's …/reranks)
    model: str
    api_key: str = ""
    timeout_sec: float = 10.0
    candidates: int = 20

    @property
    def url(self) -> str:
        base = self.base_url.rstrip("/")
        return base if base.endswith(("/rerank", "/reranks")) else base + "/rerank"


@dataclass(frozen=True)
class Ranked:
    index: int  # the document's place in the request, from 0
    score: float  # the reranker's relevance score: higher is more relevant


def rerank_config() -> RerankConfig | None:
    """The configured reranker (RERANK_* settings), None when reranking is off."""
    if not settings.RERANK_BASE_URL:
        return None
    return RerankConfig(base_url=settings.RERANK_BASE_URL, model=settings.RERANK_MODEL,
                        api_key=settings.RERANK_API_KEY, timeout_sec=settings.RERANK_TIMEOUT_SEC,
                        candidates=settings.RERANK_CANDIDATES)


def rerank_create(*, query: str, documents: Sequence[str], top_n: int,
                  config: RerankConfig | None = None) -> list[Ranked]:
    """The `top_n` documents most relevant to `query` by the reranker (`config`, else the
    settings'), best first, within its timeout. For sync code (admin's 试检索, knowledge_eval);
    raises RerankError, or ValueError when reranking is off."""
    config = _config_or_settings(config)

    async def run() -> list[Ranked]:
        async with capped_client_new() as client:
            return await _rerank(client, config, query, documents, top_n)

    return asyncio.run(run())


async def arerank_create(*, query: str, documents: Sequence[str], top_n: int,
                         config: RerankConfig | None = None) -> list[Ranked]:
    """See rerank_create(); for the event loop (a tool's search), on a client kept per loop."""
    return await _rerank(loop_clients.get(), _config_or_settings(config), query, documents, top_n)


def _config_or_settings(config: RerankConfig | None) -> RerankConfig:
    config = config or rerank_config()
    if config is None:
        raise ValueError("reranking is off (RERANK_BASE_URL is empty)")
    return config


async def _rerank(client: httpx.AsyncClient, config: RerankConfig, query: str, documents: Sequence[str],
                  top_n: int) -> list[Ranked]:
    if not isinstance(query, str) or not query.strip():
        raise RerankError(MSG_QUERY)
    for n, text in enumerate(documents, 1):
        if not isinstance(text, str) or not text.strip():
            raise RerankError(MSG_TEXT.format(n=n))
    documents = list(documents)
    top_n = max(1, min(top_n, len(documents)))
    if not documents:
        return []
    started = time.monotonic()
    try:
        async with asyncio.timeout(config.timeout_sec):  # the whole request: connect, send, every read
            body = await answer_post(
                client, url=config.url, api_key=config.api_key, words=WORDS,
                body={"model": config.model, "query": query, "documents": documents, "top_n": top_n},
                cap=answer_max_bytes(documents),
            )
        ranked = results_read(body, count=len(documents), top_n=top_n)
    except Exception as exc:
        error = error_of(exc, words=WORDS, timeout_sec=config.timeout_sec)
        # Counts and the reason only: the texts are a student's question and documents' passages.
        logger.warning("rerank {} failed on {} document(s) after {:.3f}s: {}", config.model, len(documents),
                       time.monotonic() - started, error)
        raise error from exc
    logger.debug("rerank {}: {} document(s) in {:.3f}s", config.model, len(documents), time.monotonic() - started)
    return ranked


def answer_max_bytes(documents: Sequence[str]) -> int:
    echoed = sum(len(text.encode()) for text in documents) * 2
    return ANSWER_ENVELOPE_BYTES + echoed + len(documents) * ANSWER_BYTES_PER_RESULT


def results_read(body: bytes, *, count: int, top_n: int) -> list[Ranked]:
    """The best `top_n` of a rerank answer to `count` documents, best first (by score; equal
    scores in the answer's order). Servers answer `top_n` results, some every document: from
    `top_n` to `count` are taken. Raises RerankError when it is not JSON, has fewer or more
    results, an index out of range or twice, or a score that is not a finite number."""
    answer = json_read(body, words=WORDS)
    results = answer.get("results") if isinstance(answer, dict) else None
    if not isinstance(results, list):
        raise RerankError(MSG_NO_RESULTS)
    if not top_n <= len(results) <= count:
        raise RerankError(MSG_COUNT.format(asked=count, answered=len(results), least=top_n))
    ranked: list[Ranked] = []
    seen: set[int] = set()
    for n, item in enumerate(results, 1):
        if not isinstance(item, dict) or type(item.get("index")) is not int or "relevance_score" not in item:
            raise RerankError(MSG_ITEM.format(n=n))
        index, score = item["index"], item["relevance_score"]
        if not 0 <= index < count or index in seen:
            raise RerankError(MSG_INDEX.format(n=n, index=index, last=count - 1))
        if not finite(score):
            raise RerankError(MSG_NUMBER.format(n=n))
        seen.add(index)
        ranked.append(Ranked(index=index, score=float(score)))
    # sorted() is stable: a server's order stands among equal scores.
    return sorted(ranked, key=lambda r: -r.score)[:top_n]
