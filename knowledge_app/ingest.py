"""Documents taken into a collection (docs/knowledge.md#adding-documents): from admin's upload of
several files at once or `manage.py knowledge_import`.

- **The kind is read from the content**, never from the name (knowledge_app.parsing.document_kind:
  PDF and DOCX by their signatures, as the students' uploads; text — UTF-8, GB18030 or UTF-16 —
  as HTML, Markdown or plain text by what it holds).
- **Caps**: KNOWLEDGE_FILE_MAX_BYTES per file; an empty file is refused. (Pages and the parsing's
  CPU and memory are capped when it is read, in a child process.)
- **The same content once per collection**: a file whose SHA-256 is already there is not added
  again (the existing document is returned), whatever its name.

A document added here waits for indexing (status `waiting`).
"""

import hashlib
from dataclasses import dataclass
from pathlib import PurePath

from django.conf import settings
from django.core.files.base import ContentFile
from django.db import IntegrityError, transaction

from campus_agent.base.text import label_clean
from knowledge_app import parsing
from knowledge_app.models import KnowledgeCollection, KnowledgeDocument

# The MIME type a document is stored and served with, by the kind parsing reads it as.
CONTENT_TYPES = {
    parsing.PDF: "application/pdf",
    parsing.DOCX: "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    parsing.MARKDOWN: "text/markdown",
    parsing.HTML: "text/html",
    parsing.TEXT: "text/plain",
}
EXTENSIONS = {parsing.PDF: ".pdf", parsing.DOCX: ".docx", parsing.MARKDOWN: ".md", parsing.HTML: ".html",
              parsing.TEXT: ".txt"}
TITLE_MAX = KnowledgeDocument._meta.get_field("title").max_length
NAME_MAX = 100

MSG_EMPTY = "文件是空的。"
MSG_TOO_LARGE = "文件不能超过 {limit} MB。"
MSG_KIND = "只收 PDF、Word（.docx）、Markdown、HTML 和纯文本文件（按内容判断，与文件名无关）。"


class DocumentRefused(ValueError):
    """A file not taken, and why (in Chinese, for staff)."""


@dataclass(frozen=True)
class Added:
    document: KnowledgeDocument
    created: bool  # False: the same content was already in the collection


def document_kind(data: bytes) -> str:
    """The file's kind as read from its content (DocumentRefused when it is none we take)."""
    kind = parsing.document_kind(data)
    if kind is None:
        raise DocumentRefused(MSG_KIND)
    return kind


def title_of_name(name: str) -> str:
    """A document's title before it is read: its file's name without the extension, cleaned."""
    stem = label_clean(PurePath(name).stem).strip()
    return (stem or "未命名文件")[:TITLE_MAX]


def _stored_name(name: str, kind: str) -> str:
    """The name the file is stored under: its own, cleaned and short, with the extension of its kind."""
    extension = EXTENSIONS[kind]
    stem = label_clean(PurePath(name).stem).replace("/", "_").replace("\\", "_").strip() or "document"
    return stem[: NAME_MAX - len(extension)] + extension


def document_add(*, collection: KnowledgeCollection, name: str, data: bytes, uploaded_by=None) -> Added:
    """Takes one file into `collection` (DocumentRefused: why not)."""
    if not data:
        raise DocumentRefused(MSG_EMPTY)
    if len(data) > settings.KNOWLEDGE_FILE_MAX_BYTES:
        raise DocumentRefused(MSG_TOO_LARGE.format(limit=settings.KNOWLEDGE_FILE_MAX_BYTES // (1024 * 1024)))
    kind = document_kind(data)
    content_hash = hashlib.sha256(data).hexdigest()
    existing = KnowledgeDocument.objects.filter(collection=collection, content_hash=content_hash).first()
    if existing is not None:
        return Added(existing, created=False)
    document = KnowledgeDocument(
        collection=collection, title=title_of_name(name), file_name=label_clean(name)[:255], content_type=CONTENT_TYPES[kind],
        size=len(data), content_hash=content_hash, uploaded_by=uploaded_by,
    )
    document.file.save(_stored_name(name, kind), ContentFile(data), save=False)
    try:
        with transaction.atomic():
            document.save()
    except IntegrityError:  # the same file added at the same moment by someone else
        document.file.delete(save=False)
        return Added(KnowledgeDocument.objects.get(collection=collection, content_hash=content_hash), created=False)
    return Added(document, created=True)
