"""The child process that reads a document's text (docs/security.md#documents-parsed-under-limits).

Run by `campus_agent.base.documents` as `python -I parser.py KIND CPU_SEC MEMORY_BYTES MAX_CHARS
MAX_PAGES`, the document on its stdin. It puts its own limits on itself before it reads a byte
(CPU seconds: the kernel ends it with SIGXCPU; address space: an allocation past it fails, which
Python raises as MemoryError), then writes one JSON object on stdout: `{"text", "cut"}`, or
`{"refused": "encrypted" | "zip" | "broken" | "memory"}` for a document it will not read.

It imports nothing of the project and no Django: `-I` gives it no project path, no PYTHON*
variables, no user site, and the parent gives it an empty environment.
"""

import io
import json
import logging
import resource
import sys
import warnings
import zipfile

# A DOCX is a zip: its members are checked before any is unpacked, so a zip bomb is refused, not
# unpacked. A compression ratio past 200 is a bomb's, not a Word file's.
DOCX_MAX_MEMBERS = 2000
DOCX_MAX_UNPACKED = 50 * 1024 * 1024
DOCX_MAX_RATIO = 200


class Refused(Exception):
    """A document not read, for a reason the parent names to the student."""


def limits_set(cpu_sec: int, memory_bytes: int) -> None:
    """Lowers this process's limits (never above a hard limit it was started with)."""
    for kind, soft, hard in [
        (resource.RLIMIT_CORE, 0, 0),  # a process ended by SIGXCPU leaves no core file
        (resource.RLIMIT_CPU, cpu_sec, cpu_sec + 1),  # SIGXCPU at the soft limit, SIGKILL a second later
        (resource.RLIMIT_AS, memory_bytes, memory_bytes),
    ]:
        ceiling = resource.getrlimit(kind)[1]
        if ceiling != resource.RLIM_INFINITY:
            soft, hard = min(soft, ceiling), min(hard, ceiling)
        resource.setrlimit(kind, (soft, hard))


def memory_exhausted(memory_bytes: int) -> bool:
    """Whether this process came within a tenth of its address-space limit: a library may report an
    allocation that failed as something else (lxml raises XMLSyntaxError "unknown error")."""
    try:
        with open("/proc/self/status") as status:  # Linux: VmPeak, the largest address space it had
            peak_kb = next(int(line.split()[1]) for line in status if line.startswith("VmPeak:"))
    except (OSError, StopIteration, ValueError):
        return False
    return peak_kb * 1024 > memory_bytes * 0.9


def capped(text: str, max_chars: int, cut: bool = False) -> dict:
    text = text.replace("\x00", "")
    return {"text": text[:max_chars], "cut": cut or len(text) > max_chars}


def pdf_text(data: bytes, max_chars: int, max_pages: int) -> dict:
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data))
    if reader.is_encrypted and not reader.decrypt(""):
        raise Refused("encrypted")
    parts, total = [], 0
    for index, page in enumerate(reader.pages):  # a PDF's scripts are never run: only its text is read
        if index >= max_pages or total > max_chars:
            return capped("\n".join(parts), max_chars, cut=True)
        piece = page.extract_text() or ""
        parts.append(piece)
        total += len(piece)
    return capped("\n".join(parts), max_chars)


def docx_text(data: bytes, max_chars: int) -> dict:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        members = archive.infolist()
        unpacked = sum(m.file_size for m in members)
        if (
            len(members) > DOCX_MAX_MEMBERS
            or unpacked > DOCX_MAX_UNPACKED
            or any(m.compress_size and m.file_size / m.compress_size > DOCX_MAX_RATIO for m in members)
        ):
            raise Refused("zip")
    from docx import Document

    document = Document(io.BytesIO(data))
    lines = [p.text for p in document.paragraphs]
    for table in document.tables:
        lines.extend("\t".join(cell.text for cell in row.cells) for row in table.rows)
    return capped("\n".join(line for line in lines if line), max_chars)


def main(argv: list[str]) -> dict:
    kind, cpu_sec, memory_bytes, max_chars, max_pages = argv[0], *map(int, argv[1:5])
    limits_set(cpu_sec, memory_bytes)
    # pypdf logs a warning per flaw it meets, as often as a file repeats one: the parent would
    # hold all of it. Only the one line below reaches stderr.
    logging.disable(logging.CRITICAL)
    warnings.simplefilter("ignore")
    data = sys.stdin.buffer.read()
    try:
        return pdf_text(data, max_chars, max_pages) if kind == "pdf" else docx_text(data, max_chars)
    except Refused as exc:
        return {"refused": str(exc)}
    except Exception as exc:  # noqa: BLE001 - whatever a broken or hostile file raises, it is not read
        print(f"{type(exc).__name__}: {exc}"[:300], file=sys.stderr)  # the parent logs it
        return {"refused": "memory" if isinstance(exc, MemoryError) or memory_exhausted(memory_bytes) else "broken"}


if __name__ == "__main__":
    sys.stdout.write(json.dumps(main(sys.argv[1:])))
