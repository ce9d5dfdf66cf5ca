"""A collection's search asks the embeddings provider for the question's vector on the turn's own
event loop, never on one of the few database threads every stream shares: a provider that hangs
holds only its own turns (agents_app/runtime/knowledge_tool.py, campus_agent/base/asyncdb.py).
Against the WordLlama embeddings server, scripted to hang."""

import asyncio
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async

from agents_app.runtime.context import RunContext
from agents_app.runtime.knowledge_tool import KnowledgeTool
from campus_agent.base.asyncdb import DB_THREADS, db_call
from knowledge_app.indexing import documents_index_waiting
from knowledge_app.ingest import document_add
from knowledge_app.models import KnowledgeCollection, KnowledgeDocument

pytestmark = pytest.mark.django_db(transaction=True)

HANDBOOK = Path(__file__).resolve().parents[2] / "demo_app" / "knowledge"


def _collection() -> KnowledgeCollection:
    collection = KnowledgeCollection.objects.create(slug="dorm", name="宿舍", description="宿舍管理规定")
    document_add(collection=collection, name="dormitory.md", data=(HANDBOOK / "dormitory.md").read_bytes())
    documents_index_waiting()
    return collection


async def test_a_hanging_provider_never_holds_the_database_threads(embeddings_settings, embeddings_server, settings,
                                                                   tmp_path):
    settings.MEDIA_ROOT = tmp_path
    collection = await sync_to_async(_collection)()
    assert await sync_to_async(KnowledgeDocument.objects.filter(passage_count__gt=0).count)() == 1
    for _ in range(DB_THREADS + 2):
        embeddings_server.hang()  # each question's vector: the 1 s timeout ends it
    tool = KnowledgeTool(collection=collection)
    ctx = RunContext(request_id="r", conversation_id="c")
    order: list[str] = []

    async def search() -> None:
        outcome = await tool.run({"query": "宿舍楼几点关门"}, ctx, emit=None)
        assert "23:00 关门" in outcome.text  # the keywords still serve
        order.append("search")

    async def probe() -> None:
        while len(embeddings_server.requests) < DB_THREADS + 2:  # every search is asking the provider
            await asyncio.sleep(0.01)
        await db_call(lambda: None)
        order.append("probe")

    await asyncio.gather(*(search() for _ in range(DB_THREADS + 2)), probe())
    assert order[0] == "probe"  # the database answered while every search waited on the provider
