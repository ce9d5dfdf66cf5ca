"""Reciprocal rank fusion (Cormack, Clarke and Büttcher, SIGIR 2009): several rankings of the same
items — the keyword index's and the vectors' — made into one, without comparing their scores
(BM25's and a cosine's are on different scales). An item scores Σ 1 / (k + rank) over the
rankings it appears in, rank counted from 1; k = 60 is the paper's, and what Elasticsearch,
OpenSearch and Azure AI Search use by default."""

from collections.abc import Hashable, Sequence
from typing import TypeVar

RRF_K = 60
T = TypeVar("T", bound=Hashable)


def rrf_fuse(rankings: Sequence[Sequence[T]], k: int = RRF_K) -> list[tuple[T, float]]:
    """One ranking from several: [(item, fused score)], best first. Items that tie keep the order
    in which they were first seen (the first ranking's first), so the result is deterministic.
    An item listed twice in one ranking counts at its best rank there."""
    if k < 0:
        raise ValueError("k must be ≥ 0")
    scores: dict[T, float] = {}
    for ranking in rankings:
        seen: set[T] = set()
        for rank, item in enumerate(ranking, start=1):
            if item in seen:
                continue
            seen.add(item)
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    # sorted() is stable: ties stay in first-seen order (the dict's insertion order).
    return sorted(scores.items(), key=lambda pair: -pair[1])
