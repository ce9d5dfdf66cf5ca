"""With a reranker, a search gives the fused passages' first RERANK_CANDIDATES to it and returns its
order; a reranker that hangs, fails or answers nonsense leaves the fused order; off, nothing changes
(knowledge_app/search.py). Against the bigram rerank server on loopback (testkit/rerank_server.py):
for REORDER_QUESTION the keywords rank 甲 first and the 宿舍晚上 passage 乙 fourth; the reranker
puts 乙 first."""

from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse
from loguru import logger

from knowledge_app.evaluation import Case, collection_evaluate
from knowledge_app.search import KEYWORD, RERANK, collection_search, passage_document
from testkit.fixtures.rerank import REORDER_QUESTION, RERANK_FAILURES
from testkit.rerank_server import relevance

pytestmark = pytest.mark.django_db(transaction=True)

KEYWORD_ORDER = ["甲", "丙", "戊", "乙", "丁"]
RERANKED_ORDER = ["乙", "甲", "丙", "戊", "丁"]


def _headings(hits) -> list[str]:
    return [hit.passage.heading for hit in hits]


def test_the_reranker_reorders_the_fused_passages(rerank_settings, rerank_server, reorder_collection):
    assert _headings(collection_search(reorder_collection, REORDER_QUESTION, limit=5, reranked=False)) == KEYWORD_ORDER
    hits = collection_search(reorder_collection, REORDER_QUESTION, limit=3)
    assert _headings(hits) == RERANKED_ORDER[:3]  # 乙 came from the fourth place, past the three asked
    request = rerank_server.last_request.body
    assert request["top_n"] == 3 and request["query"] == REORDER_QUESTION
    assert request["documents"] == [passage_document(hit) for hit in
                                    collection_search(reorder_collection, REORDER_QUESTION, limit=20, reranked=False)]
    first = hits[0]
    assert first.found_by == (KEYWORD, RERANK) and first.ranks == {KEYWORD: 4, RERANK: 1}
    assert first.rerank_score == relevance(REORDER_QUESTION, request["documents"][3]) == 2 / 3
    assert first.score == pytest.approx(0.1756, abs=1e-3)  # the keywords' own score is kept beside it


def test_the_candidates_are_capped_by_the_setting(rerank_settings, rerank_server, reorder_collection):
    rerank_settings.RERANK_CANDIDATES = 3
    assert _headings(collection_search(reorder_collection, REORDER_QUESTION, limit=2)) == ["甲", "丙"]
    assert len(rerank_server.last_request.body["documents"]) == 3  # 乙, fourth, was not among them
    rerank_settings.RERANK_CANDIDATES = 1
    assert len(collection_search(reorder_collection, REORDER_QUESTION, limit=4)) == 4  # never fewer than asked
    assert len(rerank_server.last_request.body["documents"]) == 4


def test_without_a_reranker_nothing_changes_and_nothing_is_asked(settings, rerank_server, reorder_collection):
    settings.RERANK_BASE_URL = ""
    hits = collection_search(reorder_collection, REORDER_QUESTION, limit=5)
    assert _headings(hits) == KEYWORD_ORDER
    assert all(hit.found_by == (KEYWORD,) and hit.rerank_score is None for hit in hits)
    assert rerank_server.requests == []


@pytest.mark.parametrize("script", list(RERANK_FAILURES.values()), ids=list(RERANK_FAILURES))
def test_a_failing_reranker_leaves_the_fused_order(rerank_settings, rerank_server, reorder_collection, script):
    rerank_settings.RERANK_TIMEOUT_SEC = 0.3
    script(rerank_server)
    logged: list[str] = []
    sink = logger.add(lambda message: logged.append(str(message)), level="WARNING")
    try:
        hits = collection_search(reorder_collection, REORDER_QUESTION, limit=3)
    finally:
        logger.remove(sink)
    assert rerank_server.asked.is_set()
    assert _headings(hits) == KEYWORD_ORDER[:3]
    assert all(RERANK not in hit.found_by and hit.rerank_score is None for hit in hits)
    assert any("the fused order kept: 重排模型" in line for line in logged)
    assert not any(REORDER_QUESTION in line for line in logged)


def test_staff_see_the_rerank_score_and_rank(admin_client, rerank_settings, rerank_server, reorder_collection):
    url = reverse("admin:knowledge_app_search", args=[reorder_collection.pk])
    page = admin_client.get(url, {"q": REORDER_QUESTION}).content.decode()
    rows = page.split("<tbody>")[1].split("</tbody>")[0].split("<tr>")[1:]
    assert [row.count("<td>") for row in rows] == [8] * 5  # 重排得分 among them
    assert "<td>乙</td>" in rows[0] and "keyword（4）、rerank（1）" in rows[0] and "<td>0.6667</td>" in rows[0]
    assert "重排得分" in page


def test_knowledge_eval_measures_with_and_without_the_reranker(rerank_settings, rerank_server, reorder_collection,
                                                               tmp_path):
    case = Case(question=REORDER_QUESTION, document="生活须知", heading="乙")
    assert collection_evaluate(collection=reorder_collection, cases=[case], k=1).results[0].rank == 1
    assert collection_evaluate(collection=reorder_collection, cases=[case], k=1, reranked=False).results[0].rank is None
    assert len(rerank_server.requests) == 1
    cases = tmp_path / "cases.yaml"
    cases.write_text(f"cases:\n  - question: {REORDER_QUESTION}\n    document: 生活须知\n    heading: 乙\n",
                     encoding="utf-8")
    for flags, summary in (([], "1 cases (reranked by bigram-reranker): recall@1 1.000"),
                           (["--no-rerank"], "1 cases (fused order, no reranker): recall@1 0.000")):
        out = StringIO()
        call_command("knowledge_eval", str(cases), "--collection", "life", "--k", "1", *flags, stdout=out)
        assert out.getvalue().strip().splitlines()[-1].startswith(summary)
