"""The child process that reads a document's text (docs/security.md#documents-parsed-under-limits).

Run by `campus_agent.base.documents` as `python -I parser.py KIND CPU_SEC MEMORY_BYTES MAX_CHARS
MAX_PAGES`, the document on its stdin. It puts its own limits on itself before it reads a byte
(CPU seconds: the kernel ends it with SIGXCPU; address space: an allocation past it fails, which
Python raises as MemoryError), then writes one JSON object on stdout:

- KIND "pdf" or "docx": the flat text, `{"text", "cut"}` (attachments);
- KIND "pdf-blocks", "docx-blocks" or "html-blocks": the document's structure (the knowledge
  base), `{"title", "pages", "blocks", "cut"}`, each block `[kind, level, text, page]`: kind
  "heading" (level 1–9), "paragraph", "row" (a table row, its cells joined by " | ") or "page"
  (a PDF page's whole text, whose headings the caller recognises); page 1-based, or null;
  a PDF of more than MAX_PAGES pages is refused ("pages"), not cut;

or `{"refused": "encrypted" | "zip" | "broken" | "memory" | "pages"}` for a document it will not read.

A flat PDF (an attachment) is read by pypdf, a structured one (the knowledge base) by PDFium
(PdfiumPages), for the reasons docs/knowledge.md#how-documents-are-read-and-cut gives.

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
    """An attachment's text, read by pypdf (pure Python) for the reason docs/knowledge.md gives:
    any student can send one, so the parser they reach is memory-safe; an attachment is small."""
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


class PdfiumPages:
    """A PDF opened by PDFium (pypdfium2; Chromium's PDF library, built without JavaScript or XFA:
    a file's scripts cannot run) for its pages' text: 6-8× pypdf's speed on a long Chinese PDF
    with the same lines, headings and characters (bench/knowledge_indexing.py), which is what
    lets a 1,000-page document be read far inside DOCUMENT_PARSE_CPU_SEC. PDFium is C++: an
    allocation past RLIMIT_AS aborts it (SIGABRT), which the parent reports as "memory"."""

    def __init__(self, data: bytes):
        import pypdfium2
        import pypdfium2.raw

        try:
            self.document = pypdfium2.PdfDocument(data)
        except pypdfium2.PdfiumError as exc:
            # PDFium tries the empty password itself, as pypdf's decrypt("") does.
            raise Refused("encrypted" if exc.err_code == pypdfium2.raw.FPDF_ERR_PASSWORD else "broken") from exc

    def __len__(self) -> int:
        return len(self.document)

    def texts(self):
        """Each page's text in order, its lines ended by "\n" as pypdf ends them (PDFium: "\r\n")."""
        for index in range(len(self.document)):
            page = self.document[index]
            textpage = page.get_textpage()
            try:
                text = textpage.get_text_range()
            finally:
                textpage.close()
                page.close()
            yield text.replace("\r\n", "\n").replace("\r", "\n")

    def title(self) -> str:
        return self.document.get_metadata_value("Title") or ""

    def close(self) -> None:
        self.document.close()


def docx_text(data: bytes, max_chars: int) -> dict:
    zip_check(data)
    from docx import Document

    document = Document(io.BytesIO(data))
    lines = [p.text for p in document.paragraphs]
    for table in document.tables:
        lines.extend("\t".join(cell.text for cell in row.cells) for row in table.rows)
    return capped("\n".join(line for line in lines if line), max_chars)


# --- structure (the knowledge base): blocks with their headings, pages and table rows --------------

HEADING, PARAGRAPH, ROW, PAGE = "heading", "paragraph", "row", "page"
CELL_JOIN = " | "
CJK = "\u2e80-\u9fff\uf900-\ufaff\uff00-\uffef\u3000-\u303f"


def text_clean(text: str) -> str:
    """Whitespace runs made one space, except a line break between two CJK characters, which is
    none (a line wrapped in the source is not a space in Chinese)."""
    import re

    text = re.sub(rf"(?<=[{CJK}])[ \t]*[\r\n]\s*(?=[{CJK}])", "", text.replace("\x00", ""))
    return re.sub(r"\s+", " ", text).strip()


class Blocks:
    """The blocks of a document, up to max_chars characters of text (then `cut`)."""

    def __init__(self, max_chars: int):
        self.items: list[list] = []
        self.chars = 0
        self.max_chars = max_chars
        self.cut = False

    def add(self, kind: str, level: int, text: str, page: int | None) -> bool:
        """False once full: the caller stops reading."""
        if self.cut:
            return False
        if not text:
            return True
        if self.chars + len(text) > self.max_chars:
            text, self.cut = text[: self.max_chars - self.chars], True
        self.chars += len(text)
        if text:
            self.items.append([kind, level, text, page])
        return not self.cut

    def answer(self, title: str, pages: int | None) -> dict:
        return {"title": title, "pages": pages, "blocks": self.items, "cut": self.cut}


def pdf_blocks(data: bytes, max_chars: int, max_pages: int) -> dict:
    """A knowledge-base PDF's pages, read by PDFium (PdfiumPages: staff upload these, and a long
    one must be read well inside the CPU limit)."""
    reader = PdfiumPages(data)
    try:
        pages = len(reader)
        if pages > max_pages:
            raise Refused("pages")
        blocks = Blocks(max_chars)
        for number, text in enumerate(reader.texts(), 1):
            if not blocks.add(PAGE, 0, text.replace("\x00", ""), number):
                break
        title = ""
        try:
            title = reader.title()
        except Exception:  # noqa: BLE001 - a broken info dictionary leaves the title to the caller
            pass
        return blocks.answer(text_clean(title), pages)
    finally:
        reader.close()


def zip_check(data: bytes) -> None:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        members = archive.infolist()
        unpacked = sum(m.file_size for m in members)
        if (
            len(members) > DOCX_MAX_MEMBERS
            or unpacked > DOCX_MAX_UNPACKED
            or any(m.compress_size and m.file_size / m.compress_size > DOCX_MAX_RATIO for m in members)
        ):
            raise Refused("zip")


def docx_heading_level(paragraph) -> int:
    """1–9 for a heading: its style's name ("Heading 2", "标题 2", as Word names it in either
    language), else the outline level set on the paragraph or on its style (or a style it is based
    on); 0 for body text."""
    import re

    style = paragraph.style
    name = (style.name or "") if style is not None else ""
    found = re.fullmatch(r"(?:heading|标题)\s*([1-9])", name.strip(), re.IGNORECASE)
    if found:
        return int(found.group(1))
    candidates = [paragraph._p.pPr]
    seen = 0
    while style is not None and seen < 20:  # a style chain, bounded: a file could loop it
        candidates.append(style.element.pPr)
        style, seen = style.base_style, seen + 1
    for ppr in candidates:
        if ppr is None:
            continue
        outline = ppr.find("{http://schemas.openxmlformats.org/wordprocessingml/2006/main}outlineLvl")
        if outline is not None:
            value = outline.get("{http://schemas.openxmlformats.org/wordprocessingml/2006/main}val", "")
            return int(value) + 1 if value.isdigit() and int(value) < 9 else 0
    return 0


def docx_blocks(data: bytes, max_chars: int) -> dict:
    zip_check(data)
    from docx import Document
    from docx.table import Table

    document = Document(io.BytesIO(data))
    blocks = Blocks(max_chars)
    title = ""
    for item in document.iter_inner_content():  # paragraphs and tables, in the body's order
        if isinstance(item, Table):
            for row in item.rows:
                cells, seen = [], set()
                for cell in row.cells:  # a merged cell is given once per grid column it spans
                    if id(cell._tc) not in seen:
                        seen.add(id(cell._tc))
                        cells.append(text_clean(cell.text))
                if any(cells):
                    blocks.add(ROW, 0, CELL_JOIN.join(cells), None)
        else:
            text, level = text_clean(item.text), docx_heading_level(item)
            if not title and item.style is not None and item.style.name == "Title":
                title = text
            blocks.add(HEADING if level else PARAGRAPH, level, text, None)
        if blocks.cut:
            break
    return blocks.answer(text_clean(document.core_properties.title or "") or title, None)


def html_blocks(data: bytes, max_chars: int) -> dict:
    """h1–h6, paragraphs (p, li, and text between block tags), table rows; script, style and the
    like dropped. The standard library's tolerant parser: no tree is built, so a document's size
    costs its length, not its nesting."""
    from html.parser import HTMLParser

    # Not text a reader sees. Not "head": a page that never closes it would lose its body.
    skipped = {"script", "style", "template", "noscript", "svg", "math", "iframe", "object", "title"}
    breaking = {
        "p", "div", "li", "ul", "ol", "dl", "dt", "dd", "br", "hr", "section", "article", "main", "aside",
        "header", "footer", "nav", "blockquote", "pre", "figure", "figcaption", "form", "body", "html",
        "table", "caption", "address", "details", "summary",
    }
    blocks = Blocks(max_chars)

    class Reader(HTMLParser):
        def __init__(self):
            super().__init__(convert_charrefs=True)
            self.skipping = 0  # depth inside skipped elements
            self.buffer: list[str] = []
            self.level = 0  # inside an h1–h6
            self.cells: list[str] | None = None  # inside a tr
            self.cell: list[str] | None = None  # inside a td / th
            self.title: list[str] | None = None
            self.title_text = ""

        def flush(self):
            text = text_clean("".join(self.buffer))
            self.buffer = []
            if text:
                blocks.add(HEADING if self.level else PARAGRAPH, self.level, text, None)

        def cell_end(self):
            if self.cell is not None and self.cells is not None:
                self.cells.append(text_clean("".join(self.cell)))
            self.cell = None

        def row_end(self):
            self.cell_end()
            if self.cells is not None and any(self.cells):
                blocks.add(ROW, 0, CELL_JOIN.join(self.cells), None)
            self.cells = None

        def handle_starttag(self, tag, attrs):
            if tag == "title" and not self.title_text:
                self.title = []
            if tag in skipped:
                self.skipping += 1
                return
            if self.skipping:
                return
            if tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
                self.flush()
                self.level = int(tag[1])
            elif tag == "tr":
                self.flush()
                self.row_end()
                self.cells = []
            elif tag in ("td", "th"):
                self.cell_end()
                if self.cells is None:
                    self.cells = []
                self.cell = []
            elif tag in breaking and self.cell is None:
                self.flush()

        def handle_startendtag(self, tag, attrs):
            if tag in ("br", "hr") and not self.skipping:
                if self.cell is not None:
                    self.cell.append(" ")
                else:
                    self.flush()

        def handle_endtag(self, tag):
            if tag == "title" and self.title is not None:
                self.title_text, self.title = text_clean("".join(self.title)), None
            if tag in skipped:
                self.skipping = max(0, self.skipping - 1)
                return
            if self.skipping:
                return
            if tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
                self.flush()
                self.level = 0
            elif tag in ("td", "th"):
                self.cell_end()
            elif tag == "tr":
                self.row_end()
            elif tag == "table":
                self.row_end()
            elif tag in breaking and self.cell is None:
                self.flush()

        def handle_data(self, data):
            if self.title is not None:
                self.title.append(data)
            if self.skipping:
                return
            (self.cell if self.cell is not None else self.buffer).append(data)

    reader = Reader()
    text = data.decode("utf-8", errors="replace")
    for start in range(0, len(text), 65536):  # fed in pieces: stops reading once full
        reader.feed(text[start : start + 65536])
        if blocks.cut:
            break
    else:
        reader.close()
        reader.flush()
        reader.row_end()
    return blocks.answer(reader.title_text, None)


STRUCTURED = {"pdf-blocks", "docx-blocks", "html-blocks"}


def main(argv: list[str]) -> dict:
    kind, cpu_sec, memory_bytes, max_chars, max_pages = argv[0], *map(int, argv[1:5])
    limits_set(cpu_sec, memory_bytes)
    # pypdf logs a warning per flaw it meets, as often as a file repeats one: the parent would
    # hold all of it. Only the one line below reaches stderr.
    logging.disable(logging.CRITICAL)
    warnings.simplefilter("ignore")
    data = sys.stdin.buffer.read()
    try:
        if kind == "pdf-blocks":
            return pdf_blocks(data, max_chars, max_pages)
        if kind == "docx-blocks":
            return docx_blocks(data, max_chars)
        if kind == "html-blocks":
            return html_blocks(data, max_chars)
        return pdf_text(data, max_chars, max_pages) if kind == "pdf" else docx_text(data, max_chars)
    except Refused as exc:
        return {"refused": str(exc)}
    except Exception as exc:  # noqa: BLE001 - whatever a broken or hostile file raises, it is not read
        print(f"{type(exc).__name__}: {exc}"[:300], file=sys.stderr)  # the parent logs it
        return {"refused": "memory" if isinstance(exc, MemoryError) or memory_exhausted(memory_bytes) else "broken"}


if __name__ == "__main__":
    sys.stdout.write(json.dumps(main(sys.argv[1:])))
