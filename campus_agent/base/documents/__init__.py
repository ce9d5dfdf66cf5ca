"""A document's text, read in a child process under limits (docs/security.md#documents-parsed-under-limits).

A PDF or DOCX is parsed by pypdf (an attachment's PDF), PDFium (pypdfium2: a knowledge-base
PDF, docs/knowledge.md#how-documents-are-read-and-cut) or python-docx, whose cost a file chooses: a 45 MB
`document.xml` packed under the zip-bomb ratio took a worker 22 s and 575 MB, an 85 KB PDF of
empty `() Tj` operators 68 s. So no worker parses one itself: each document goes to a fresh
interpreter (`parser.py`, which imports nothing of the project and gets no environment) with

- DOCUMENT_PARSE_CPU_SEC of CPU time (RLIMIT_CPU: the kernel ends it),
- DOCUMENT_PARSE_MEMORY_MB of address space (RLIMIT_AS: an allocation past it fails),
- DOCUMENT_PARSE_TIMEOUT_SEC of wall-clock time, waiting for a turn included (then it is killed),
- at most DOCUMENT_PARSE_MAX_CONCURRENT children per worker process at once,

and a document over any of them is refused with the reason (DocumentRefused). The caller's thread
waits on a pipe without holding the GIL, so the worker's event loop never waits on a parse. A
fresh interpreter (not a fork of a worker, whose threads and memory a fork would copy) costs
about 0.1 s a document: the start and the parsing library's import.

It lives in the shared base, where every app may use it: attachments (chat_app) read a
document's flat text (document_text), the knowledge base (knowledge_app.parsing) its structure
(document_blocks: headings, paragraphs, table rows, pages), under the same limits.
"""

import json
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.utils.translation import gettext_lazy as _
from loguru import logger

PARSER = str(Path(__file__).with_name("parser.py"))

REASONS = {
    "encrypted": _("文件已加密"),
    "zip": _("文件的压缩结构异常（解压后过大或条目过多）"),
    "broken": _("文件已损坏或格式不对"),
    "memory": _("解析它需要的内存超过上限（{memory} MB），文件可能过于复杂"),
    "cpu": _("解析它需要的计算时间超过上限（{cpu} 秒），文件可能过于复杂"),
    "timeout": _("解析超时（超过 {timeout} 秒），文件可能过于复杂"),
    "busy": _("服务器正忙于解析其他文件，请稍后重试"),
    "pages": _("页数超过上限（{max_pages} 页）"),
}


class DocumentRefused(Exception):
    """A document whose text was not read: `reason` is a key of REASONS, `message` what the
    student is told (in the request's language)."""

    def __init__(self, reason: str, *, max_pages: int = 0):
        self.reason = reason
        self.message = str(REASONS[reason]).format(
            cpu=settings.DOCUMENT_PARSE_CPU_SEC,
            memory=settings.DOCUMENT_PARSE_MEMORY_MB,
            timeout=f"{settings.DOCUMENT_PARSE_TIMEOUT_SEC:g}",  # 20, not 20.0
            max_pages=max_pages,
        )
        super().__init__(self.message)


@dataclass(frozen=True)
class Extracted:
    text: str
    cut: bool  # longer than max_chars: the text is its beginning


@dataclass(frozen=True)
class RawBlock:
    """A piece of a document as the child read it (parser.py): `kind` "heading" (`level` 1–9),
    "paragraph", "row" (a table row, cells joined by " | ") or "page" (a PDF page's whole text,
    its headings left to the caller); `page` 1-based, None for a format without pages."""

    kind: str
    level: int
    text: str
    page: int | None


@dataclass(frozen=True)
class Structured:
    title: str  # from the file's properties or its title element; "" when it has none
    pages: int | None  # a PDF's page count; None for other formats
    blocks: list[RawBlock]
    cut: bool  # longer than max_chars: the blocks are its beginning


_turns = threading.Condition()
_parsing = 0


@contextmanager
def parse_slot(deadline: float):
    """One of the worker's DOCUMENT_PARSE_MAX_CONCURRENT parses, waited for until `deadline`
    (time.monotonic()); DocumentRefused("busy") past it."""
    global _parsing
    with _turns:
        if not _turns.wait_for(
            lambda: _parsing < settings.DOCUMENT_PARSE_MAX_CONCURRENT, timeout=max(0.0, deadline - time.monotonic())
        ):
            logger.warning("document refused reason=busy parsing={}", _parsing)
            raise DocumentRefused("busy")
        _parsing += 1
    try:
        yield
    finally:
        with _turns:
            _parsing -= 1
            _turns.notify()


def _answer(child: subprocess.Popen, out: bytes) -> dict:
    # Past the soft CPU limit, or the hard one a second later (a SIGKILL of ours is the timeout's).
    if child.returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        return {"refused": "cpu"}
    # PDFium (a knowledge-base PDF) ends its process with abort() when an allocation fails past
    # RLIMIT_AS (its FX_OutOfMemoryTerminate); its other checks trap (SIGILL/SIGTRAP): "broken".
    if child.returncode == -signal.SIGABRT:
        return {"refused": "memory"}
    try:
        answer = json.loads(out)
    except ValueError:
        answer = None
    if child.returncode != 0 or not isinstance(answer, dict):  # another signal (a crash in C code), or no start
        return {"refused": "broken"}
    return answer


def _parsed(*, data: bytes, kind: str, max_chars: int, max_pages: int) -> dict:
    """The child's answer for `data` read as `kind` (a KIND of parser.py); DocumentRefused when it
    refused the document or went past a limit."""
    started = time.monotonic()
    deadline = started + settings.DOCUMENT_PARSE_TIMEOUT_SEC
    argv = [
        sys.executable,
        "-I",
        PARSER,
        kind,
        str(settings.DOCUMENT_PARSE_CPU_SEC),
        str(settings.DOCUMENT_PARSE_MEMORY_MB * 1024 * 1024),
        str(max_chars),
        str(max_pages),
    ]
    with parse_slot(deadline):
        # No environment (the worker's holds SECRET_KEY and the database URL) and "/" as its
        # directory: a parser bug a file exploits finds nothing of ours by a relative path.
        child = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={}, cwd="/"
        )
        try:
            out, err = child.communicate(data, timeout=max(0.0, deadline - time.monotonic()))
            answer = _answer(child, out)
        except subprocess.TimeoutExpired:
            child.kill()
            out, err = child.communicate()
            answer = {"refused": "timeout"}
    elapsed = time.monotonic() - started
    if "refused" in answer:
        logger.warning(
            "document refused kind={} bytes={} reason={} seconds={:.2f} exit={} stderr={!r}",
            kind,
            len(data),
            answer["refused"],
            elapsed,
            child.returncode,
            err[-300:].decode(errors="replace"),
        )
        raise DocumentRefused(answer["refused"], max_pages=max_pages)
    logger.info(
        "document parsed kind={} bytes={} chars={} cut={} seconds={:.2f}",
        kind,
        len(data),
        len(answer["text"]) if "text" in answer else sum(len(b[2]) for b in answer["blocks"]),
        answer["cut"],
        elapsed,
    )
    return answer


def document_text(*, data: bytes, kind: str, max_chars: int, max_pages: int) -> Extracted:
    """The text of a `kind` ("pdf" or "docx") document: at most `max_chars` characters (cut and
    marked so) from at most `max_pages` pages; DocumentRefused when it cannot be read within the
    limits. Blocking: async code calls it in a thread, where it waits on the child, not the CPU."""
    answer = _parsed(data=data, kind=kind, max_chars=max_chars, max_pages=max_pages)
    return Extracted(answer["text"], answer["cut"])


def document_blocks(*, data: bytes, kind: str, max_chars: int, max_pages: int) -> Structured:
    """The structure of a `kind` ("pdf", "docx" or "html") document, read in the child under the
    same limits as document_text: its blocks in order, at most `max_chars` characters of them (cut
    and marked so); a PDF of more than `max_pages` pages is refused (DocumentRefused("pages")),
    not cut, since a knowledge base that silently lost its end would answer wrongly. Blocking,
    as document_text."""
    answer = _parsed(data=data, kind=f"{kind}-blocks", max_chars=max_chars, max_pages=max_pages)
    return Structured(
        title=answer["title"],
        pages=answer["pages"],
        blocks=[RawBlock(kind, level, text, page) for kind, level, text, page in answer["blocks"]],
        cut=answer["cut"],
    )
