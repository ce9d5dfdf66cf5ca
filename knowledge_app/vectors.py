"""Passage vectors (docs/knowledge.md#vectors-optional): one per passage, beside it in the database,
searched by cosine distance within one collection; deleted with their passage (or collection).

Two ways to keep them, chosen per call by what the column is (`vectors_backend()`):

- **pgvector** (PostgreSQL with the extension; migration 0002 makes the column pgvector's `vector`
  when the extension is there or can be created): an HNSW index per vector size — pgvector's own
  recipe for a column that holds several sizes, a partial index on `embedding::vector(N)` where
  `dimensions = N`, made by the first store of that size — searched with `<=>` and an iterative
  index scan (pgvector ≥ 0.8), so that a collection's filter still yields `limit` rows;
- **numpy** (the embedded SQLite, and PostgreSQL without pgvector): float32 bytes, searched by brute
  force over the collection's vectors: exact, and fast enough for a single machine's collections
  (a few tens of thousands of passages).

Vectors are stored at unit length (cosine distance is the same, and the brute force is one matrix
product). Only EMBEDDINGS_DIMENSIONS-long vectors are taken or searched: after a change of model
or size, the older vectors are simply not found until the documents are indexed again.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from django.conf import settings
from django.db import connection, models, transaction

from knowledge_app.models import KnowledgeCollection, KnowledgePassage

BACKEND_PGVECTOR = "pgvector"
BACKEND_NUMPY = "numpy"


class VectorsError(ValueError):
    """Vectors that cannot be stored or searched (count, size, values, unknown passages)."""


class PassageVector(models.Model):
    """A passage's embedding. `collection` is the passage's document's (a document never moves),
    kept here so that a search filters one column."""

    passage = models.OneToOneField(
        KnowledgePassage, primary_key=True, on_delete=models.CASCADE, related_name="vector", verbose_name="段落"
    )
    collection = models.ForeignKey(
        KnowledgeCollection, on_delete=models.CASCADE, related_name="+", db_index=False, verbose_name="知识库"
    )
    dimensions = models.PositiveSmallIntegerField("维数")
    # float32 little-endian at unit length; on PostgreSQL with pgvector the column is `vector`
    # (migration 0002) and only the SQL here reads or writes it.
    embedding = models.BinaryField("向量")

    class Meta:
        app_label = "knowledge_app"
        verbose_name = verbose_name_plural = "段落向量"
        indexes = [models.Index(fields=["collection", "dimensions"], name="knowledge_vector_collection")]

    def __str__(self) -> str:
        return f"{self.passage_id} ({self.dimensions})"


TABLE = PassageVector._meta.db_table
# pgvector's HNSW index, for one size; `n` is an int checked against the settings.
HNSW_INDEX_NAME = "knowledge_vector_hnsw_{n}"
HNSW_INDEX_SQL = (
    "CREATE INDEX IF NOT EXISTS {name} ON " + TABLE
    + " USING hnsw ((embedding::vector({n})) vector_cosine_ops) WHERE dimensions = {n}"
)
SEARCH_SQL = (
    "SELECT passage_id, (embedding::vector({n})) <=> %s::float4[]::vector({n}) AS distance FROM " + TABLE
    + " WHERE dimensions = {n} AND collection_id = %s ORDER BY distance LIMIT %s"
)


def vectors_backend() -> str:
    """`pgvector` when the embedding column is pgvector's `vector`, else `numpy`."""
    return BACKEND_PGVECTOR if _pgvector_version() else BACKEND_NUMPY


def vectors_store(passage_ids: Sequence[int], vectors) -> None:
    """Stores each passage's vector, replacing the one it had, in one transaction. Raises
    VectorsError when the counts differ, a vector is not EMBEDDINGS_DIMENSIONS finite numbers
    (not all zero), or a passage does not exist."""
    matrix = _unit_rows(vectors)
    ids = [int(i) for i in passage_ids]
    if len(ids) != len(matrix):
        raise VectorsError(f"{len(ids)} passages, {len(matrix)} vectors")
    if len(set(ids)) != len(ids):
        raise VectorsError("a passage is listed twice")
    collections = dict(KnowledgePassage.objects.filter(id__in=ids).values_list("id", "document__collection_id"))
    if len(collections) != len(ids):
        raise VectorsError(f"no passage {sorted(set(ids) - set(collections))[:5]}")
    n = matrix.shape[1]
    with transaction.atomic():
        PassageVector.objects.filter(passage_id__in=ids).delete()
        if _pgvector_version():
            _hnsw_index_ensure(n)
            with connection.cursor() as cursor:
                cursor.executemany(
                    f"INSERT INTO {TABLE} (passage_id, collection_id, dimensions, embedding)"
                    " VALUES (%s, %s, %s, %s::float4[]::vector)",
                    [(i, collections[i], n, row.tolist()) for i, row in zip(ids, matrix, strict=True)],
                )
        else:
            PassageVector.objects.bulk_create(
                [PassageVector(passage_id=i, collection_id=collections[i], dimensions=n, embedding=row.astype("<f4").tobytes())
                 for i, row in zip(ids, matrix, strict=True)],
                batch_size=500,
            )


def vectors_search(collection_id: int, query_vector, limit: int) -> list[tuple[int, float]]:
    """The `limit` passages of the collection nearest to `query_vector`, as (passage id, cosine
    distance from 0 to 2), nearest first. Raises VectorsError when the query is not
    EMBEDDINGS_DIMENSIONS finite numbers (not all zero)."""
    query = _unit_rows([query_vector])[0]
    n = len(query)
    if limit <= 0:
        return []
    version = _pgvector_version()
    if version:
        with transaction.atomic(), connection.cursor() as cursor:
            if _version_tuple(version) >= (0, 8):
                # The collection's filter comes after the index scan: go on scanning until
                # `limit` rows pass it, in exact order (pgvector 0.8's iterative scans).
                cursor.execute("SET LOCAL hnsw.iterative_scan = strict_order")
            cursor.execute(SEARCH_SQL.format(n=n), [query.tolist(), collection_id, limit])
            return [(passage_id, float(distance)) for passage_id, distance in cursor.fetchall()]
    with connection.cursor() as cursor:  # not the ORM: a fifth less time for the rows
        cursor.execute(f"SELECT passage_id, embedding FROM {TABLE} WHERE collection_id = %s AND dimensions = %s",
                       [collection_id, n])
        rows = cursor.fetchall()
    if not rows:
        return []
    ids = np.fromiter((passage_id for passage_id, _ in rows), dtype=np.int64, count=len(rows))
    matrix = np.frombuffer(b"".join(blob for _, blob in rows), dtype="<f4").reshape(len(rows), n)
    distances = 1.0 - matrix @ query.astype("<f4")
    k = min(limit, len(rows))
    nearest = np.argpartition(distances, k - 1)[:k]
    nearest = nearest[np.lexsort((ids[nearest], distances[nearest]))]
    return [(int(ids[i]), float(distances[i])) for i in nearest]


def _unit_rows(vectors) -> np.ndarray:
    n = settings.EMBEDDINGS_DIMENSIONS
    if len(vectors) == 0:
        return np.empty((0, n), dtype=np.float32)
    try:
        matrix = np.array(vectors, dtype=np.float64)
    except (TypeError, ValueError):
        raise VectorsError("vectors of numbers, all of one size") from None
    if matrix.ndim != 2 or (len(matrix) and matrix.shape[1] != n):
        got = matrix.shape[1] if matrix.ndim == 2 else "uneven"
        raise VectorsError(f"vectors of {got} dimensions, EMBEDDINGS_DIMENSIONS is {n}")
    if not np.isfinite(matrix).all():
        raise VectorsError("a vector holds a value that is not a finite number")
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    if (norms == 0).any():
        raise VectorsError("a vector of zeros has no direction")
    return (matrix / norms).astype(np.float32)


def _pgvector_version() -> str | None:
    """pgvector's version when the embedding column is its `vector` type, else None."""
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT (SELECT extversion FROM pg_extension WHERE extname = 'vector')"
            " FROM pg_attribute WHERE attrelid = %s::regclass AND attname = 'embedding'"
            " AND format_type(atttypid, NULL) = 'vector'",
            [TABLE],
        )
        row = cursor.fetchone()
    return row[0] if row else None


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".")[:2] if part.isdigit())


def _hnsw_index_ensure(n: int) -> None:
    name = HNSW_INDEX_NAME.format(n=int(n))
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [name])
        if cursor.fetchone()[0]:
            return
        # Two workers storing their first vectors of this size at once: one makes the index, the
        # other waits for it here and finds it made.
        cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"{TABLE}.hnsw"])
        # PostgreSQL refuses CREATE INDEX on a table whose rows this transaction changed while
        # their foreign keys' checks wait for the commit (Django's are deferred): check them now,
        # then defer again as Django's constraints are.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute(HNSW_INDEX_SQL.format(name=name, n=int(n)))
        cursor.execute("SET CONSTRAINTS ALL DEFERRED")
