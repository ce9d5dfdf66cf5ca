"""Passage vectors (knowledge_app/vectors.py), stored and searched on the suite's database: on
PostgreSQL with the real pgvector (HNSW, cosine), on SQLite as float32 bytes searched in numpy;
the vectors come from the WordLlama embeddings server (testkit/embeddings_server.py)."""

import numpy as np
import pytest
from django.db import connection, transaction

from knowledge_app.embeddings import embeddings_create
from knowledge_app.models import KnowledgeCollection, KnowledgeDocument, KnowledgePassage
from knowledge_app.vectors import (
    BACKEND_NUMPY,
    BACKEND_PGVECTOR,
    SEARCH_SQL,
    PassageVector,
    VectorsError,
    vectors_backend,
    vectors_search,
    vectors_store,
)

# The engine decides how vectors are kept: a test of each runs on both passes of .ci/run.
pytestmark = [pytest.mark.django_db, pytest.mark.embedded]

# English: WordLlama's Chinese is weak (it proves the plumbing; the keyword index carries Chinese).
HANDBOOK = {
    "major": "Students may change their major after the first year if their grades rank in the top third.",
    "library": "The library opens at eight in the morning and closes at ten at night, weekends included.",
    "dormitory": "Dormitory rooms are inspected every month; cooking appliances are not allowed.",
    "leave": "A leave of absence for illness requires a hospital certificate and the counselor's approval.",
    "scholarship": "Scholarships are awarded each autumn on grades and community service.",
}
QUESTIONS = {"library": "What time does the library close?", "scholarship": "How are scholarships awarded?"}


def _collection(slug: str, passages: dict[str, str]) -> tuple[KnowledgeCollection, dict[str, KnowledgePassage]]:
    collection = KnowledgeCollection.objects.create(slug=slug, name=slug, description=slug)
    document = KnowledgeDocument.objects.create(collection=collection, title=slug, file=f"{slug}.md",
                                                content_hash=slug.ljust(64, "0"))
    return collection, {key: KnowledgePassage.objects.create(document=document, seq=n, text=text)
                        for n, (key, text) in enumerate(passages.items())}


@pytest.fixture
def handbook(embeddings_settings):
    """The handbook's passages, their vectors stored from the embeddings server."""
    collection, passages = _collection("handbook", HANDBOOK)
    vectors_store([p.id for p in passages.values()], embeddings_create(texts=list(HANDBOOK.values())))
    return collection, passages


def _query(text: str) -> list[float]:
    return embeddings_create(texts=[text])[0]


def test_the_engines_own_way_is_used():
    """On PostgreSQL, the real pgvector (scripts/_pgvector.sh installs it for the suite): a pass
    without it fails here rather than test the fallback only."""
    expected = BACKEND_PGVECTOR if connection.vendor == "postgresql" else BACKEND_NUMPY
    assert vectors_backend() == expected


@pytest.mark.parametrize("topic", list(QUESTIONS))
def test_a_questions_nearest_passage_is_found(handbook, topic):
    collection, passages = handbook
    query = _query(QUESTIONS[topic])
    found = vectors_search(collection.id, query, 3)
    assert found[0][0] == passages[topic].id
    # The distances are cosine distances, nearest first, as numpy computes them.
    vectors = {p.id: v for p, v in zip(passages.values(), embeddings_create(texts=list(HANDBOOK.values())), strict=True)}
    unit = np.asarray(query) / np.linalg.norm(query)
    for passage_id, distance in found:
        vector = np.asarray(vectors[passage_id]) / np.linalg.norm(vectors[passage_id])
        assert distance == pytest.approx(1 - float(unit @ vector), abs=1e-5)
    assert [d for _, d in found] == sorted(d for _, d in found)


def test_a_search_stays_in_its_collection(handbook):
    collection, passages = handbook
    other, other_passages = _collection("other", {"library": HANDBOOK["library"] + " Really."})
    vectors_store([other_passages["library"].id], [_query(other_passages["library"].text)])
    query = _query(QUESTIONS["library"])
    assert other_passages["library"].id not in {i for i, _ in vectors_search(collection.id, query, 10)}
    assert [i for i, _ in vectors_search(other.id, query, 10)] == [other_passages["library"].id]
    assert len(vectors_search(collection.id, query, 10)) == len(HANDBOOK)


def test_storing_again_replaces_a_passages_vector(handbook):
    collection, passages = handbook
    vectors_store([passages["dormitory"].id], [_query(QUESTIONS["library"])])
    assert vectors_search(collection.id, _query(QUESTIONS["library"]), 1)[0][0] == passages["dormitory"].id
    assert PassageVector.objects.count() == len(HANDBOOK)


def test_vectors_go_with_their_passages(handbook):
    collection, passages = handbook
    passages["library"].delete()
    assert PassageVector.objects.count() == len(HANDBOOK) - 1
    assert passages["library"].id not in {i for i, _ in vectors_search(collection.id, _query(QUESTIONS["library"]), 10)}
    collection.documents.get().delete()
    assert PassageVector.objects.count() == 0
    assert vectors_search(collection.id, _query(QUESTIONS["library"]), 10) == []


def test_a_vector_of_another_size_is_refused(handbook):
    collection, passages = handbook
    with pytest.raises(VectorsError, match="128 dimensions, EMBEDDINGS_DIMENSIONS is 256"):
        vectors_store([passages["major"].id], [[0.5] * 128])
    with pytest.raises(VectorsError, match="128 dimensions"):
        vectors_search(collection.id, [0.5] * 128, 3)
    with pytest.raises(VectorsError, match="all of one size"):
        vectors_store([passages["major"].id, passages["leave"].id], [[0.5] * 256, [0.5] * 255])


@pytest.mark.parametrize("vectors, message", [
    ([[0.5] * 256] * 2, "1 passages, 2 vectors"),
    ([[0.0] * 256], "zeros"),
    ([[float("nan")] * 256], "finite"),
    ([["x"] * 256], "numbers"),
])
def test_vectors_that_cannot_be_stored_are_refused(handbook, vectors, message):
    _, passages = handbook
    with pytest.raises(VectorsError, match=message):
        vectors_store([passages["major"].id], vectors)


def test_an_unknown_passage_is_refused(handbook):
    with pytest.raises(VectorsError, match="no passage"):
        vectors_store([10**9], [[0.5] * 256])


def test_vectors_left_from_another_size_are_not_searched(handbook, settings):
    """After a change of EMBEDDINGS_DIMENSIONS the older vectors are not compared with the new."""
    collection, passages = handbook
    settings.EMBEDDINGS_DIMENSIONS = 64
    vectors_store([passages["leave"].id], [[0.5] * 64])
    assert [i for i, _ in vectors_search(collection.id, [0.5] * 64, 10)] == [passages["leave"].id]


@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_postgresql_searches_through_the_hnsw_index(handbook):
    """The search's own SQL can use the HNSW index the first store made (cosine operator class)."""
    collection, _ = handbook
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'knowledge_vector_hnsw_256'")
        (definition,) = cursor.fetchone()
        assert "USING hnsw" in definition and "vector_cosine_ops" in definition
        with transaction.atomic():
            # A table of five rows: a scan or a sort would be cheaper; without them, the index.
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute("SET LOCAL enable_sort = off")
            cursor.execute("EXPLAIN " + SEARCH_SQL.format(n=256), [_query(QUESTIONS["library"]), collection.id, 3])
            plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "knowledge_vector_hnsw_256" in plan, plan
