"""A document made searchable (docs/knowledge.md#indexing): its file read (knowledge_app.parsing, in
a child process under limits), cut into passages (knowledge_app.passages) and stored in place of
its old ones in one transaction, so a search sees the document before or after, never half of it.

Indexing runs beside the workers' answers, never on their event loop: a thread of the process
that took the upload (one at a time per process), or `manage.py knowledge_index`. A document is
claimed first (`waiting` → `indexing`, one UPDATE), so two processes never index the same one;
one left `indexing` by a process that died is waiting again after KNOWLEDGE_INDEX_STALE_SEC.
"""

import threading
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from loguru import logger

from knowledge_app.embeddings import EmbeddingsError, embeddings_config, embeddings_create
from knowledge_app.ingest import TITLE_MAX, title_of_name
from knowledge_app.models import KnowledgeDocument, KnowledgePassage
from knowledge_app.parsing import ParseFailed, document_parse, numbered
from knowledge_app.passages import passages_cut
from knowledge_app.vectors import VectorsError, vectors_store

Status = KnowledgeDocument.Status
BATCH = 500
BUSY = "busy"  # ParseFailed.reason when no parser was free in time
MSG_UNREADABLE = "无法读取文件：{error}"
MSG_NO_VECTORS = "可按关键词检索，但没有生成向量：{error}"

_worker: "_IndexThread | None" = None
_worker_lock = threading.Lock()


def document_claim(document_id: int) -> bool:
    """`waiting` → `indexing` for this process; False when another took it (or it is not waiting)."""
    return bool(KnowledgeDocument.objects.filter(pk=document_id, status=Status.WAITING)
                .update(status=Status.INDEXING, progress=0, error="", updated_at=timezone.now()))


def _progress(document_id: int, percent: int) -> None:
    KnowledgeDocument.objects.filter(pk=document_id).update(progress=percent)


def _failed(document: KnowledgeDocument, message: str) -> None:
    logger.warning("knowledge document {} failed: {}", document.pk, message)
    KnowledgeDocument.objects.filter(pk=document.pk).update(status=Status.FAILED, error=message[:2000], progress=0,
                                                            updated_at=timezone.now())


def document_index(document: KnowledgeDocument) -> None:
    """Indexes a document this process claimed: `ready` with its passages, or `failed` with the reason."""
    try:
        with document.file.open("rb") as handle:
            data = handle.read()
    except OSError as exc:
        _failed(document, MSG_UNREADABLE.format(error=type(exc).__name__))
        return
    _progress(document.pk, 10)
    try:
        parsed = document_parse(data=data)
    except ParseFailed as exc:
        if exc.reason == BUSY:  # the worker's parsers are all taken: the document waits for the next round
            KnowledgeDocument.objects.filter(pk=document.pk).update(status=Status.WAITING, progress=0)
            return
        _failed(document, exc.message)
        return
    _progress(document.pk, 60)
    passages = passages_cut(parsed.blocks)
    rows = [KnowledgePassage(document_id=document.pk, seq=p.seq, text=p.text, heading=p.heading[:500], page=p.page)
            for p in passages]
    # The file's own title (its properties, <title>, its first heading) replaces the one its name
    # gave, the first time: a title staff wrote is theirs, and a chapter (「第一章 总则」) is no title.
    named = document.indexed_at is None and document.title == title_of_name(document.file_name)
    own = parsed.title if parsed.title and numbered(parsed.title, True) is None else ""
    title = own[:TITLE_MAX] if named and own else document.title
    with transaction.atomic():
        KnowledgePassage.objects.filter(document_id=document.pk).delete()
        KnowledgePassage.objects.bulk_create(rows, batch_size=BATCH)
        KnowledgeDocument.objects.filter(pk=document.pk).update(
            status=Status.READY, progress=100, error="", pages=parsed.pages, passage_count=len(rows), title=title,
            indexed_at=timezone.now(), updated_at=timezone.now(),
        )
    _vectors_add(document, rows)
    logger.info("knowledge document {} indexed passages={} pages={}", document.pk, len(rows), parsed.pages)


def _vectors_add(document: KnowledgeDocument, rows: list[KnowledgePassage]) -> None:
    """With an embeddings provider, each passage's vector (its heading path and text). A provider
    that fails leaves the document searchable by its keywords, the reason on its page."""
    config = embeddings_config()
    if config is None or not rows:
        return
    texts = [f"{row.heading}\n{row.text}" if row.heading else row.text for row in rows]
    try:
        vectors_store([row.pk for row in rows], embeddings_create(texts=texts, config=config))
    except (EmbeddingsError, VectorsError) as exc:
        KnowledgeDocument.objects.filter(pk=document.pk).update(error=MSG_NO_VECTORS.format(error=exc)[:2000])
        logger.warning("knowledge document {}: no vectors: {}", document.pk, exc)


def documents_index_waiting() -> int:
    """Indexes every waiting document this process can claim (stale `indexing` ones first made
    waiting again); returns how many it indexed."""
    stale = timezone.now() - timedelta(seconds=settings.KNOWLEDGE_INDEX_STALE_SEC)
    KnowledgeDocument.objects.filter(status=Status.INDEXING, updated_at__lt=stale).update(status=Status.WAITING)
    done = 0
    tried: set[int] = set()
    while True:
        waiting = [pk for pk in KnowledgeDocument.objects.filter(status=Status.WAITING).order_by("pk")
                   .values_list("pk", flat=True)[:50] if pk not in tried]
        if not waiting:
            return done
        for pk in waiting:
            tried.add(pk)  # once per call: a busy parser leaves it waiting for the next call
            if document_claim(pk):
                document_index(KnowledgeDocument.objects.get(pk=pk))
                done += 1


def indexing_start() -> None:
    """Indexes the waiting documents on a thread of this process, one document at a time; a call
    while the thread runs is picked up by it (it looks again before it ends)."""
    global _worker
    with _worker_lock:
        if _worker is not None:
            _worker.again = True
            return
        _worker = _IndexThread()
        _worker.start()


class _IndexThread(threading.Thread):
    def __init__(self) -> None:
        super().__init__(name="knowledge-index", daemon=True)
        self.again = True

    def run(self) -> None:
        global _worker
        try:
            while True:
                with _worker_lock:
                    if not self.again:
                        _worker = None
                        return
                    self.again = False
                documents_index_waiting()
        except Exception:  # noqa: BLE001 - logged; the documents wait for the next start
            logger.exception("knowledge indexing failed")
            with _worker_lock:
                _worker = None
        finally:
            connection.close()  # this thread's own connection
