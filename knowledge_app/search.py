"""Searching a collection: the passages that best answer a query, with their scores and which
index found them (docs/knowledge.md#keyword-search).

Today the keyword index alone serves. The vectors, when an embeddings provider is configured, come
in at `_rankings` (the seam): each index gives its own ranking, and reciprocal rank fusion
(knowledge_app.fusion.rrf_fuse) makes them one; with a single ranking its own scores are kept, so
what staff see is BM25's.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field

from loguru import logger

from knowledge_app.embeddings import EmbeddingsError, aembeddings_create, embeddings_config, embeddings_create
from knowledge_app.fusion import rrf_fuse
from knowledge_app.keyword_index import keyword_search
from knowledge_app.models import KnowledgeCollection, KnowledgeDocument, KnowledgePassage
from knowledge_app.synonyms import query_expanded
from knowledge_app.vectors import VectorsError, vectors_search

KEYWORD = "keyword"
VECTOR = "vector"
EMBED = object()  # collection_search asks the embeddings provider itself (sync callers)
# How many passages each index proposes for fusion: more than asked, so that a passage ranked
# well by one index and fairly by the other can still come first.
CANDIDATES_PER_INDEX = 50


@dataclass(frozen=True)
class SearchHit:
    passage: KnowledgePassage  # with its document (select_related)
    score: float  # BM25's with the keyword index alone; the fused score (RRF) with several
    found_by: tuple[str, ...]  # which indexes ranked it: ("keyword",), later ("keyword", "vector")
    ranks: dict[str, int] = field(default_factory=dict)  # its rank (from 1) in each of them


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
                      vector: Sequence[float] | None | object = EMBED) -> list[SearchHit]:
    """The `limit` passages of the collection that best answer `query`, best first (sync: call
    it through sync_to_async from async code, with the `vector` query_vector() gave). Only
    passages of ready documents are found."""
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
