"""Searching a collection: the passages that best answer a query, with their scores and which
index found them (docs/knowledge.md#keyword-search).

The keyword index always serves. The vectors, when an embeddings provider is configured, come in
at `_rankings` (the seam): each index gives its own ranking, and reciprocal rank fusion
(knowledge_app.fusion.rrf_fuse) makes them one; with a single ranking its own scores are kept, so
what staff see is BM25's. A reranker, when one is configured, then scores the first
RERANK_CANDIDATES of that order again against the question and its order is the one given
(`hits_rerank`); one that fails leaves the fused order.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from loguru import logger

from campus_agent.base.asyncdb import db_call
from knowledge_app.embeddings import EmbeddingsError, aembeddings_create, embeddings_config, embeddings_create
from knowledge_app.fusion import rrf_fuse
from knowledge_app.keyword_index import keyword_search
from knowledge_app.models import KnowledgeCollection, KnowledgeDocument, KnowledgePassage
from knowledge_app.rerank import Ranked, RerankConfig, RerankError, arerank_create, rerank_config, rerank_create
from knowledge_app.synonyms import query_expanded
from knowledge_app.vectors import VectorsError, vectors_search

KEYWORD = "keyword"
VECTOR = "vector"
RERANK = "rerank"
EMBED = object()  # collection_search asks the embeddings provider itself (sync callers)
# How many passages each index proposes for fusion: more than asked, so that a passage ranked
# well by one index and fairly by the other can still come first.
CANDIDATES_PER_INDEX = 50


@dataclass(frozen=True)
class SearchHit:
    passage: KnowledgePassage  # with its document (select_related)
    score: float  # BM25's with the keyword index alone; the fused score (RRF) with several
    # Which indexes ranked it — ("keyword",), ("keyword", "vector") — and "rerank" when the reranker
    # scored it; its rank (from 1) in each of them.
    found_by: tuple[str, ...]
    ranks: dict[str, int] = field(default_factory=dict)
    rerank_score: float | None = None  # the reranker's relevance score, when it ran


def _rankings(collection: KnowledgeCollection, query: str, limit: int,
              vector: Sequence[float] | None | object) -> dict[str, list[tuple[int, float]]]:
    """Each index's ranking of the collection's passages for the query: {index: [(passage id,
    score)]}, best first: the keyword index's, and, with an embeddings provider, the vectors'
    (score: 1 − cosine distance). `vector`: the question's, when the caller asked the provider
    itself (the tool, on its event loop: a database thread never waits on the provider); None:
    none to use; EMBED: ask here. A provider that fails leaves the keyword ranking alone."""
    candidates = max(limit, CANDIDATES_PER_INDEX)
    # The keywords read the question with the collection's synonyms (knowledge_app.synonyms).
    rankings = {KEYWORD: keyword_search(collection, query_expanded(query, collection.synonyms), k=candidates)}
    try:
        if vector is EMBED:
            config = embeddings_config()
            vector = embeddings_create(texts=[query], config=config)[0] if config is not None else None
        if vector is not None:
            rankings[VECTOR] = [(pid, 1.0 - distance)
                                for pid, distance in vectors_search(collection.pk, vector, candidates)]
    except (EmbeddingsError, VectorsError) as exc:
        logger.warning("knowledge search: the vectors left out of this search: {}", exc)
    return rankings


async def query_vector(query: str) -> list[float] | None:
    """The question's vector for collection_search, asked on the caller's event loop; None when
    no provider is configured or it failed (the keywords alone serve)."""
    config = embeddings_config()
    if config is None or not query.strip():
        return None
    try:
        return (await aembeddings_create(texts=[query], config=config))[0]
    except EmbeddingsError as exc:
        logger.warning("knowledge search: the vectors left out of this search: {}", exc)
        return None


def collection_search(collection: KnowledgeCollection, query: str, limit: int = 5, *,
                      vector: Sequence[float] | None | object = EMBED, reranked: bool = True) -> list[SearchHit]:
    """The `limit` passages of the collection that best answer `query`, best first, reranked when
    a reranker is configured (sync, for admin and knowledge_eval: it asks the embeddings provider
    and the reranker on this thread; async code calls acollection_search). Only passages of ready
    documents are found. `reranked=False`: the fused order alone."""
    config = rerank_config() if reranked else None
    hits = _fused_search(collection, query, search_candidates(limit, config), vector)
    if config is None:
        return hits[:limit]
    try:
        ranked = rerank_create(query=query, documents=[passage_document(hit) for hit in hits], top_n=limit,
                               config=config) if hits else []
    except RerankError as exc:
        return _fallback(hits, limit, exc)
    return _reordered(hits, ranked)


async def acollection_search(collection: KnowledgeCollection, query: str, limit: int = 5) -> list[SearchHit]:
    """See collection_search(); for the event loop (a tool's search). The question's vector and the
    reranker are asked here, on the caller's loop; only the indexes' search runs on a database
    thread (campus_agent/base/asyncdb.py): a slow provider holds this search, never one of the few
    threads every stream shares."""
    if limit <= 0 or not query.strip():
        return []
    config = rerank_config()
    vector = await query_vector(query)
    hits = await db_call(collection_search, collection, query, search_candidates(limit, config), vector=vector,
                         reranked=False)
    if config is None or not hits:
        return hits[:limit]
    try:
        ranked = await arerank_create(query=query, documents=[passage_document(hit) for hit in hits], top_n=limit,
                                      config=config)
    except RerankError as exc:
        return _fallback(hits, limit, exc)
    return _reordered(hits, ranked)


def search_candidates(limit: int, config: RerankConfig | None) -> int:
    """How many fused passages a search reads: `limit`, or RERANK_CANDIDATES (when more) for the
    reranker to choose from."""
    return max(limit, config.candidates) if config is not None else limit


def passage_document(hit: SearchHit) -> str:
    """What the reranker reads of a passage: where it is (the document's title, its heading path)
    and its text, as the keyword index reads it."""
    passage = hit.passage
    return "\n".join(part for part in (f"《{passage.document.title}》 {passage.heading}".strip(), passage.text) if part)


def _fallback(hits: list[SearchHit], limit: int, exc: RerankError) -> list[SearchHit]:
    # The reason only (knowledge_app.rerank logged the request's figures): never the question.
    logger.warning("knowledge search: the reranker left out of this search, the fused order kept: {}", exc)
    return hits[:limit]


def _reordered(hits: list[SearchHit], ranked: list[Ranked]) -> list[SearchHit]:
    return [replace(hits[r.index], found_by=(*hits[r.index].found_by, RERANK),
                    ranks={**hits[r.index].ranks, RERANK: rank}, rerank_score=r.score)
            for rank, r in enumerate(ranked, start=1)]


def _fused_search(collection: KnowledgeCollection, query: str, limit: int,
                  vector: Sequence[float] | None | object) -> list[SearchHit]:
    if limit <= 0 or not query.strip():
        return []
    rankings = {name: ranking for name, ranking in _rankings(collection, query, limit, vector).items() if ranking}
    if not rankings:
        return []
    ranks = {name: {pid: rank for rank, (pid, _) in enumerate(ranking, start=1)} for name, ranking in rankings.items()}
    if len(rankings) == 1:
        (ranking,) = rankings.values()
        ordered = ranking[:limit]
    else:
        ordered = rrf_fuse([[pid for pid, _ in ranking] for ranking in rankings.values()])[:limit]
    # The passages are read after the index: one whose document was replaced, or taken out of
    # search, since is left out.
    passages = (
        KnowledgePassage.objects.select_related("document")
        .filter(document__status=KnowledgeDocument.Status.READY)
        .in_bulk([pid for pid, _ in ordered])
    )
    return [
        SearchHit(
            passage=passages[pid],
            score=score,
            found_by=tuple(name for name in rankings if pid in ranks[name]),
            ranks={name: ranks[name][pid] for name in rankings if pid in ranks[name]},
        )
        for pid, score in ordered
        if pid in passages
    ]
