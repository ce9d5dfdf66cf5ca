"""Documents parsed under limits (issue 42, docs/security.md#documents-parsed-under-limits): a PDF
or DOCX is read in a child process with a CPU, a memory and a wall-clock limit, and a document over
one is refused with the reason. The attacks are the issue's, as they were sent (a DOCX whose
`document.xml` is 45 MB under the zip-bomb ratio; a PDF of 30 pages × 300,000 empty `() Tj`),
against limits set low so that each is stopped in about a second."""

import os
import time
from pathlib import Path

import pytest
from django.utils import translation

from campus_agent.base.documents import PARSER, DocumentRefused, document_text, parse_slot
from testkit.documents import docx_of_huge_body, docx_with, pdf_of_empty_shows, pdf_with

# The wall-clock limit where a test waits for another limit: a busy machine stretches one CPU
# second into several, and the reason must still be the CPU's or the memory's.
LOADED_MACHINE_SEC = 60


def _read(data: bytes, kind: str, max_chars: int = 20000):
    return document_text(data=data, kind=kind, max_chars=max_chars, max_pages=100)


def _refusal(data: bytes, kind: str) -> tuple[DocumentRefused, float]:
    started = time.monotonic()
    with pytest.raises(DocumentRefused) as refused:
        _read(data, kind)
    return refused.value, time.monotonic() - started


def _parsers_of_this_process() -> list[int]:
    """The parser children this process has (still running, or not yet reaped)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (entry / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if parent == os.getpid() and PARSER.encode() in command:
            found.append(int(entry.name))
    return found


def test_a_pdf_and_a_docx_give_their_text():
    assert _read(pdf_with("Final exam: June 18"), "pdf").text.strip() == "Final exam: June 18"
    extracted = _read(docx_with("第一周选课", "第二周退课"), "docx")
    assert (extracted.text, extracted.cut) == ("第一周选课\n第二周退课\n周一\t高数", False)
    cut = _read(docx_with("第一周选课", "第二周退课"), "docx", max_chars=5)
    assert (cut.text, cut.cut) == ("第一周选课", True)


def test_a_pdf_of_empty_text_operators_is_stopped_at_its_cpu_limit(settings):
    settings.DOCUMENT_PARSE_CPU_SEC, settings.DOCUMENT_PARSE_TIMEOUT_SEC = 1, LOADED_MACHINE_SEC
    refused, seconds = _refusal(pdf_of_empty_shows(pages=30, per_page=300_000), "pdf")  # took a worker 68 s
    assert refused.reason == "cpu" and seconds < LOADED_MACHINE_SEC, seconds
    assert refused.message == "解析它需要的计算时间超过上限（1 秒），文件可能过于复杂"


def test_a_docx_whose_body_is_45_mb_is_stopped_at_its_memory_limit(settings):
    settings.DOCUMENT_PARSE_MEMORY_MB, settings.DOCUMENT_PARSE_TIMEOUT_SEC = 200, LOADED_MACHINE_SEC
    data = docx_of_huge_body(45)  # took a worker 22 s and 575 MB
    assert len(data) < 8 * 1024 * 1024  # under UPLOAD_MAX_BYTES, and packed under the zip-bomb ratio
    refused, seconds = _refusal(data, "docx")
    assert refused.reason == "memory" and seconds < LOADED_MACHINE_SEC, seconds
    with translation.override("en"):
        assert DocumentRefused("memory").message == (
            "reading it needs more memory than allowed (200 MB): the file may be too complex"
        )


def test_past_the_wall_clock_limit_the_child_is_killed(settings):
    settings.DOCUMENT_PARSE_CPU_SEC, settings.DOCUMENT_PARSE_TIMEOUT_SEC = 60, 0.5
    refused, seconds = _refusal(pdf_of_empty_shows(pages=30, per_page=300_000), "pdf")
    assert refused.reason == "timeout" and 0.5 <= seconds < 5, seconds  # killed, not waited for
    assert refused.message == "解析超时（超过 0.5 秒），文件可能过于复杂"
    assert _parsers_of_this_process() == []


def test_past_the_parses_at_once_a_document_waits_its_turn_then_is_refused(settings):
    settings.DOCUMENT_PARSE_MAX_CONCURRENT, settings.DOCUMENT_PARSE_TIMEOUT_SEC = 1, 0.3
    with parse_slot(time.monotonic() + 10):  # another document is being parsed
        refused, seconds = _refusal(pdf_with("Hello"), "pdf")
    assert refused.reason == "busy" and 0.3 <= seconds < 5, seconds
    settings.DOCUMENT_PARSE_TIMEOUT_SEC = LOADED_MACHINE_SEC
    assert _read(pdf_with("Hello"), "pdf").text.strip() == "Hello"  # its turn given back
