"""A document made searchable: parsed, cut into passages, stored in place of its old ones at once;
claimed by one process; failed with the reason staff read (knowledge_app/indexing.py). Over the
demo handbook's real PDF, DOCX and Markdown files."""

from pathlib import Path

import pytest
from django.utils import timezone

from knowledge_app.indexing import document_claim, documents_index_waiting, indexing_start
from knowledge_app.ingest import document_add
from knowledge_app.models import KnowledgeCollection, KnowledgeDocument, KnowledgePassage
from testkit.polling import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

HANDBOOK = Path(__file__).resolve().parents[2] / "demo_app" / "knowledge"
Status = KnowledgeDocument.Status


@pytest.fixture
def handbook(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path
    return KnowledgeCollection.objects.create(slug="handbook", name="学生手册", description="学生手册")


def _added(collection, name: str) -> KnowledgeDocument:
    return document_add(collection=collection, name=name, data=(HANDBOOK / name).read_bytes()).document


def test_a_pdf_is_indexed_with_its_pages_and_headings(handbook):
    document = _added(handbook, "transfer-major.pdf")
    assert documents_index_waiting() == 1
    document.refresh_from_db()
    assert document.status == Status.READY and document.progress == 100 and document.indexed_at
    assert document.title == "转专业管理规定（示例）"  # the file's own title, not its name
    assert document.pages and document.pages > 1 and document.passage_count == document.passages.count() > 5
    condition = next(p for p in document.passages.all() if "第四条" in p.text)
    assert condition.page == 2 and "第二章" in condition.heading


@pytest.mark.parametrize("name", ["scholarship.docx", "dormitory.md"])
def test_docx_and_markdown_are_indexed(handbook, name):
    document = _added(handbook, name)
    documents_index_waiting()
    document.refresh_from_db()
    assert document.status == Status.READY and document.passages.filter(heading__contains="第").exists()


def test_a_document_that_cannot_be_read_fails_with_the_reason(handbook):
    broken = document_add(collection=handbook, name="坏文件.pdf", data=b"%PDF-1.4\n" + b"\x00garbage" * 100).document
    documents_index_waiting()
    broken.refresh_from_db()
    assert broken.status == Status.FAILED and broken.error and not broken.passages.exists()


def test_indexing_again_replaces_the_passages_at_once(handbook):
    document = _added(handbook, "dormitory.md")
    documents_index_waiting()
    first = set(KnowledgePassage.objects.values_list("pk", flat=True))
    KnowledgeDocument.objects.filter(pk=document.pk).update(status=Status.WAITING)
    documents_index_waiting()
    again = set(KnowledgePassage.objects.values_list("pk", flat=True))
    assert again and not first & again and len(again) == len(first)


def test_a_document_is_claimed_by_one_process_and_a_stale_claim_expires(handbook, settings):
    document = _added(handbook, "dormitory.md")
    assert document_claim(document.pk) and not document_claim(document.pk)
    assert documents_index_waiting() == 0  # another process has it
    settings.KNOWLEDGE_INDEX_STALE_SEC = 60
    KnowledgeDocument.objects.filter(pk=document.pk).update(updated_at=timezone.now() - timezone.timedelta(seconds=61))
    assert documents_index_waiting() == 1


def test_an_upload_is_indexed_in_the_background(handbook):
    document = _added(handbook, "library.md")
    indexing_start()
    wait_for(lambda: KnowledgeDocument.objects.get(pk=document.pk).status == Status.READY, what="indexed")


def test_staffs_upload_is_indexed_without_anything_else_to_do(admin_client, handbook):
    from django.core.files.uploadedfile import SimpleUploadedFile
    from django.urls import reverse

    data = (HANDBOOK / "dormitory.md").read_bytes()
    admin_client.post(reverse("admin:knowledge_app_upload"),
                      {"collection": handbook.pk, "files": [SimpleUploadedFile("宿舍管理规定.md", data)]})
    wait_for(lambda: KnowledgeDocument.objects.filter(status=Status.READY).exists(), what="the upload indexed")
