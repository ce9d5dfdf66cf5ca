"""A knowledge tool's search with a reranker (agents_app/runtime/knowledge_tool.py,
knowledge_app.search.acollection_search): the reranker's order is the one the model reads,
numbered, and the one `sources` carries; a reranker that hangs, fails or answers nonsense leaves
the fused order; it is asked on the turn's event loop, never on one of the few database threads
every stream shares. Against the bigram rerank server on loopback (testkit/rerank_server.py)."""

import asyncio

import pytest

from agents_app.runtime.context import RunContext
from agents_app.runtime.knowledge_tool import KnowledgeTool
from campus_agent.base.asyncdb import DB_THREADS, db_call
from testkit.fixtures.rerank import REORDER_PASSAGES, REORDER_QUESTION, RERANK_FAILURES

pytestmark = pytest.mark.django_db(transaction=True)

TEXTS = dict(REORDER_PASSAGES)
KEYWORD_ORDER = ["甲", "丙", "戊"]
RERANKED_ORDER = ["乙", "甲", "丙"]


@pytest.fixture
def passages3(settings):
    settings.KNOWLEDGE_SEARCH_PASSAGES = 3
    return settings


async def _search(collection) -> object:
    return await KnowledgeTool(collection=collection).run({"query": REORDER_QUESTION},
                                                         RunContext(request_id="r", conversation_id="c"), emit=None)


def _numbered(outcome) -> list[str]:
    """The heading of each numbered passage the model reads, in its order."""
    blocks = outcome.text.split("\n\n")[1:]
    return [block.split(" · ")[1].split("\n")[0] for block in blocks]


async def test_the_rerankers_order_is_what_the_model_reads_and_cites(rerank_settings, rerank_server, passages3,
                                                                     reorder_collection):
    outcome = await _search(reorder_collection)
    assert _numbered(outcome) == RERANKED_ORDER
    assert outcome.text.split("\n\n")[1] == f"[1] 《生活须知》 · 乙\n{TEXTS['乙']}"
    assert [(s["n"], s["heading"]) for s in outcome.sources] == list(enumerate(RERANKED_ORDER, start=1))
    assert rerank_server.last_request.body["top_n"] == 3 and len(rerank_server.last_request.body["documents"]) == 5


async def test_without_a_reranker_the_tool_reads_the_keyword_order(settings, rerank_server, passages3,
                                                                   reorder_collection):
    settings.RERANK_BASE_URL = ""
    outcome = await _search(reorder_collection)
    assert _numbered(outcome) == KEYWORD_ORDER
    assert [s["heading"] for s in outcome.sources] == KEYWORD_ORDER
    assert rerank_server.requests == []


@pytest.mark.parametrize("script", list(RERANK_FAILURES.values()), ids=list(RERANK_FAILURES))
async def test_a_failing_reranker_leaves_the_keyword_order(rerank_settings, rerank_server, passages3,
                                                           reorder_collection, script):
    rerank_settings.RERANK_TIMEOUT_SEC = 0.3
    script(rerank_server)
    outcome = await _search(reorder_collection)
    assert rerank_server.asked.is_set()
    assert _numbered(outcome) == KEYWORD_ORDER
    assert [s["heading"] for s in outcome.sources] == KEYWORD_ORDER


async def test_a_hanging_reranker_never_holds_the_database_threads(rerank_settings, rerank_server, passages3,
                                                                   reorder_collection):
    for _ in range(DB_THREADS + 2):
        rerank_server.hang()  # each search's reranking: the 1 s timeout ends it
    order: list[str] = []

    async def search() -> None:
        assert _numbered(await _search(reorder_collection)) == KEYWORD_ORDER
        order.append("search")

    async def probe() -> None:
        while len(rerank_server.requests) < DB_THREADS + 2:  # every search is waiting on the reranker
            await asyncio.sleep(0.01)
        await db_call(lambda: None)
        order.append("probe")

    await asyncio.gather(*(search() for _ in range(DB_THREADS + 2)), probe())
    assert order[0] == "probe"  # the database answered while every search waited on the reranker
