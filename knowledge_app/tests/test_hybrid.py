"""With an embeddings provider, a document's passages get vectors when it is indexed and a search
fuses the vectors' ranking with the keywords' (reciprocal rank fusion); a provider that fails
leaves the keyword search serving (knowledge_app/indexing.py, knowledge_app/search.py). Against the
real WordLlama embeddings server on loopback."""

from pathlib import Path

import pytest

from knowledge_app.indexing import documents_index_waiting
from knowledge_app.ingest import document_add
from knowledge_app.models import KnowledgeCollection, KnowledgeDocument, KnowledgePassage
from knowledge_app.search import KEYWORD, VECTOR, collection_search
from knowledge_app.vectors import PassageVector

pytestmark = pytest.mark.django_db(transaction=True)

HANDBOOK = Path(__file__).resolve().parents[2] / "demo_app" / "knowledge"


@pytest.fixture
def dormitory(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path
    collection = KnowledgeCollection.objects.create(slug="dorm", name="宿舍", description="宿舍管理规定")
    document_add(collection=collection, name="dormitory.md", data=(HANDBOOK / "dormitory.md").read_bytes())
    return collection


def test_passages_get_vectors_and_search_fuses_both_rankings(embeddings_settings, embeddings_server, dormitory):
    documents_index_waiting()
    assert PassageVector.objects.count() == KnowledgePassage.objects.count() > 0
    hits = collection_search(dormitory, "宿舍楼几点关门", limit=5)
    assert hits and all(set(hit.found_by) <= {KEYWORD, VECTOR} for hit in hits)
    assert any(VECTOR in hit.found_by for hit in hits) and any(KEYWORD in hit.found_by for hit in hits)
    assert "23:00 关门" in hits[0].passage.text  # found by both, first


def test_a_failing_provider_leaves_the_keywords_serving(embeddings_settings, embeddings_server, dormitory):
    embeddings_server.fail(500)  # indexing's vectors
    documents_index_waiting()
    document = KnowledgeDocument.objects.get()
    assert document.status == KnowledgeDocument.Status.READY and "没有生成向量" in document.error
    assert not PassageVector.objects.exists()
    embeddings_server.fail(500)  # the question's vector
    hits = collection_search(dormitory, "关门时间", limit=3)
    assert hits and all(hit.found_by == (KEYWORD,) for hit in hits)
