"""A knowledge-base document read with its structure (docs/knowledge.md#how-documents-are-read-and-cut):
its title, its pages, and its blocks in order — headings, paragraphs, table rows —, each with the
headings above it and the page it is on.

- **The type is read from the content**, never from the name: a PDF or a DOCX by its signature
  (`filetype`, as attachments do); anything else must be text (UTF-8, UTF-16 with its BOM, or GB18030 as older
  Chinese files are, no NUL), then HTML when it opens with markup, Markdown when it has `#`
  headings or a `|---|` table, plain text otherwise.
- **Untrusted bytes are parsed in the child** under its CPU, memory and time limits
  (campus_agent.base.documents.document_blocks): PDF (PDFium), DOCX (python-docx, after the
  zip-bomb check), HTML (the standard library's parser). Markdown and plain text are only decoded
  here and read line by line with anchored patterns, in time linear in their length, under the
  same character cap.
- **Headings**: DOCX heading styles and outline levels, Markdown `#` (and `===`/`---`
  underlines), HTML h1–h6; and the numbered structure of Chinese regulations — 第X编 / 第X章 /
  第X节 / 第X条, 一、, （一） (NUMBERED_RANKS) — at a line's start in a PDF and in plain text, at
  a paragraph's start in the other formats (a Word file often numbers its articles by hand).
- **Caps**: KNOWLEDGE_MAX_CHARS characters (past it: refused, "chars"), KNOWLEDGE_MAX_PAGES pages
  of a PDF (past it: refused, "pages"): a knowledge base that silently lost a document's end would
  answer from half of it. A document with no text at all (a scanned PDF) is refused too ("empty").

Pure: the same bytes give the same document. Blocking (the child): async code calls it in a thread.
"""

import re
from dataclasses import dataclass

import filetype
from django.conf import settings
from django.utils.translation import gettext_lazy as _

from campus_agent.base.documents import DocumentRefused, RawBlock, document_blocks

PDF = "pdf"
DOCX = "docx"
HTML = "html"
MARKDOWN = "markdown"
TEXT = "text"

HEADING = "heading"
PARAGRAPH = "paragraph"
ROW = "row"

CELL_JOIN = " | "
# A "heading" longer than this is a paragraph someone styled as a heading: kept as a paragraph,
# so a heading path stays short enough to show beside a citation.
HEADING_MAX_CHARS = 80

MSG_TYPE = _("只能读取 PDF、Word（.docx）、Markdown、HTML 或纯文本（UTF-8、GB18030 或 UTF-16 编码）文件")
MSG_EMPTY = _("文件里没有可读取的文字（扫描件需先做文字识别）")
MSG_CHARS = _("文字超过上限（{max_chars} 字）")


class ParseFailed(Exception):
    """A document not read: `reason` a short key ("type", "empty", "chars", or one of
    campus_agent.base.documents.REASONS), `message` what staff read in the document's failed status."""

    def __init__(self, reason: str, message: str):
        self.reason = reason
        self.message = message
        super().__init__(message)


@dataclass(frozen=True)
class Block:
    """One piece of a document in reading order. `kind` is "heading", "paragraph" or "row" (a
    table row, its cells joined by " | "); `headings` the headings above it, outermost first (for
    a heading: those above it, not itself); `page` 1-based, None for formats without pages."""

    kind: str
    text: str
    headings: tuple[str, ...]
    page: int | None


@dataclass(frozen=True)
class ParsedDocument:
    kind: str  # "pdf", "docx", "html", "markdown" or "text", as read from the content
    title: str  # the file's own title (properties, <title>, first top heading); "" when none
    pages: int | None  # a PDF's page count; None for other formats
    blocks: tuple[Block, ...]


# --- the type, from the content ------------------------------------------------------------------

FILETYPE_KINDS = {
    "application/pdf": PDF,
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": DOCX,
}
HTML_START = re.compile(r"\s*(?:<!--.*?-->\s*)*<(?:!doctype\s+html|html|head|body|meta|title|h[1-6]|p|div|table|article|section)\b",
                        re.IGNORECASE | re.DOTALL)
MARKDOWN_SIGNS = re.compile(r"^ {0,3}#{1,6}[ \t]+\S|^ {0,3}\|?[ \t]*:?-{3,}:?[ \t]*\|", re.MULTILINE)


def text_decoded(data: bytes) -> str | None:
    """The text of bytes that are text: UTF-16 with its BOM (Windows Notepad's "Unicode"), UTF-8
    (a BOM dropped), else GB18030 (older Chinese files); None for anything else with a NUL or
    that neither decodes."""
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        try:
            text = data.decode("utf-16")
        except UnicodeDecodeError:
            return None
        return None if "\x00" in text else text
    if b"\x00" in data:
        return None
    for encoding in ("utf-8-sig", "gb18030"):
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    return None


def document_kind(data: bytes) -> str | None:
    """"pdf", "docx", "html", "markdown" or "text", from the bytes alone; None for anything else."""
    guessed = filetype.guess(data)
    if guessed is not None:
        return FILETYPE_KINDS.get(guessed.mime)
    text = text_decoded(data)
    if text is None:
        return None
    head = text[:4096]
    if HTML_START.match(head):
        return HTML
    return MARKDOWN if MARKDOWN_SIGNS.search(text[:65536]) else TEXT


# --- text helpers ----------------------------------------------------------------------------------

CJK = "\u2e80-\u9fff\uf900-\ufaff\uff00-\uffef\u3000-\u303f"
CJK_END = re.compile(rf"[{CJK}]$")
CJK_START = re.compile(rf"^[{CJK}]")


def clean(text: str) -> str:
    """Whitespace runs (a full-width space too) made one space."""
    return re.sub(r"\s+", " ", text.replace("\x00", "")).strip()


def lines_joined(lines: list[str]) -> str:
    """A paragraph's lines as one text: a wrap between Chinese characters is no space."""
    out = ""
    for line in lines:
        if out and not (CJK_END.search(out) and CJK_START.search(line)):
            out += " "
        out += line
    return out


class Outline:
    """The headings above the current point: a heading of a level closes those of its level and
    deeper."""

    def __init__(self):
        self.open: list[tuple[int, str]] = []

    def path(self) -> tuple[str, ...]:
        return tuple(text for _, text in self.open)

    def heading(self, level: int, text: str) -> Block:
        while self.open and self.open[-1][0] >= level:
            self.open.pop()
        block = Block(HEADING, text, self.path(), None)
        self.open.append((level, text))
        return block


# --- numbered headings (PDF, plain text) ---------------------------------------------------------

NUMBER = r"[0-9０-９零〇一二三四五六七八九十百千两]+"
# The levels of the numbered structure of Chinese rules and handbooks, outermost first: below any
# heading a format marks itself (1–9), so that in a Word file whose chapters are styled headings
# an unstyled 「第二十条」 paragraph nests under its chapter.
NUMBERED_RANKS = {"编": 11, "章": 12, "节": 13, "条": 14, "、": 15, "（）": 16}
TITLED = re.compile(rf"^第\s*({NUMBER})\s*(编|章|节)[\s:：]*(.*)$")
ARTICLE = re.compile(rf"^(第\s*{NUMBER}\s*条)(?:[\s:：]+|$|(?=[^的规之中所款项]))(.*)$")
ITEM = re.compile(r"^([一二三四五六七八九十]+)\s*、\s*(.+)$")
SUBITEM = re.compile(r"^[（(]\s*([一二三四五六七八九十]+)\s*[）)]\s*(.+)$")
SENTENCE_END = re.compile(r"[。！？；!?;：:]\s*[”’」』）)]*$")
PAGE_MARK = re.compile(r"^(?:[-—–·\s]*\d+[-—–·\s]*|第\s*\d+\s*页(?:\s*[,，/]?\s*共\s*\d+\s*页)?|\d+\s*/\s*\d+)$")
SHORT_TITLE = 30  # a line longer than this after 第X章 is a sentence, not a chapter's title


def numbered(line: str, after_break: bool) -> tuple[int, str, str] | None:
    """(rank, heading, rest of the line) when `line` opens with a numbered heading; `after_break`:
    the line before it ended a sentence (or there was none), so that a wrapped line that starts
    with 「第二十条的规定…」 is not taken for an article."""
    found = TITLED.match(line)
    if found:
        title = found.group(3).strip()
        if len(title) <= SHORT_TITLE and not SENTENCE_END.search(line) and "。" not in title:
            # 「第三章　学籍管理」, 「第三章学籍管理」 → 「第三章 学籍管理」
            return NUMBERED_RANKS[found.group(2)], clean(f"第{found.group(1)}{found.group(2)} {title}"), ""
        return None
    if not after_break:
        return None
    found = ARTICLE.match(line)
    if found:
        return NUMBERED_RANKS["条"], re.sub(r"\s+", "", found.group(1)), line
    for pattern, rank in ((ITEM, NUMBERED_RANKS["、"]), (SUBITEM, NUMBERED_RANKS["（）"])):
        found = pattern.match(line)
        if found and len(line) <= SHORT_TITLE and not re.search(r"[。！？；!?;，,]", found.group(2)):
            return rank, clean(line), ""
    return None


def paragraph_add(blocks: list[Block], outline: Outline, text: str, page: int | None) -> None:
    """A paragraph of a format with its own headings (Word, HTML, Markdown): one that opens with a
    numbered heading (「第二十条 学生……」, 「第三章 学籍管理」) gives that heading too."""
    found = numbered(text, True)
    if found is None:
        blocks.append(Block(PARAGRAPH, text, outline.path(), page))
        return
    rank, heading, rest = found
    _heading(blocks, outline, rank, heading, page)
    if rest:
        blocks.append(Block(PARAGRAPH, rest, outline.path(), page))


def numbered_blocks(text: str, page: int | None, outline: Outline) -> list[Block]:
    """Blocks of a PDF page's or a plain text's lines: numbered headings, and paragraphs that end
    at a blank line, a heading, or a line that ends a sentence (a PDF has no blank lines between
    paragraphs; passages.py merges short ones back)."""
    blocks: list[Block] = []
    lines: list[str] = []

    def flush():
        if lines:
            blocks.append(Block(PARAGRAPH, clean(lines_joined(lines)), outline.path(), page))
            lines.clear()

    after_break = True
    for raw in text.splitlines():
        line = clean(raw)
        if not line:
            flush()
            after_break = True
            continue
        if page is not None and PAGE_MARK.match(line):  # a running page number, not text
            continue
        found = numbered(line, after_break)
        if found:
            flush()
            rank, heading, rest = found
            _heading(blocks, outline, rank, heading, page)
            if not rest:
                after_break = True
                continue
            lines.append(rest)
        else:
            lines.append(line)
        after_break = bool(SENTENCE_END.search(line))
        if after_break:
            flush()
    flush()
    return blocks


# --- Markdown --------------------------------------------------------------------------------------

ATX = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
FENCE = re.compile(r"^ {0,3}(```|~~~)")
TABLE_RULE = re.compile(r"^ {0,3}\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$")
LIST_ITEM = re.compile(r"^[ \t]*(?:[-*+]|\d{1,9}[.)])[ \t]+(.*)$")
QUOTE = re.compile(r"^ {0,3}>[ \t]?")
INLINE = [
    (re.compile(r"!\[([^\]]*)\]\([^)]*\)"), r"\1"),  # an image: its alt text
    (re.compile(r"\[([^\]]*)\]\([^)]*\)"), r"\1"),  # a link: its text
    (re.compile(r"(\*\*|__|~~|`)"), ""),
    (re.compile(r"(?<![\w*])\*(?=\S)|(?<=\S)\*(?![\w*])"), ""),
]


def inline_plain(text: str) -> str:
    for pattern, replacement in INLINE:
        text = pattern.sub(replacement, text)
    return clean(text)


def table_cells(line: str) -> list[str]:
    line = line.strip()
    line = line[1:] if line.startswith("|") else line
    line = line[:-1] if line.endswith("|") else line
    return [inline_plain(cell) for cell in line.split("|")]


def markdown_blocks(text: str) -> list[Block]:
    """ATX (`#`) and setext headings, paragraphs, list items (a paragraph each), tables (a row
    each, the rule line dropped), fenced code (a paragraph, its `#` lines not headings), quotes."""
    outline = Outline()
    blocks: list[Block] = []
    lines: list[str] = []

    def flush(code: bool = False):
        if lines:
            text = inline_plain(lines_joined([line.strip() for line in lines]))
            if text and code:
                blocks.append(Block(PARAGRAPH, text, outline.path(), None))
            elif text:
                paragraph_add(blocks, outline, text, None)
            lines.clear()

    source = [QUOTE.sub("", line) for line in text.splitlines()]
    index = 0
    while index < len(source):
        line = source[index]
        index += 1
        opened = FENCE.match(line)
        if opened:  # code: its lines as they are, up to the closing fence
            flush()
            while index < len(source) and not source[index].strip().startswith(opened.group(1)):
                lines.append(source[index])
                index += 1
            index += 1
            flush(code=True)
            continue
        if not line.strip():
            flush()
            continue
        heading = ATX.match(line)
        if heading:
            flush()
            _heading(blocks, outline, len(heading.group(1)), inline_plain(heading.group(2)), None)
            continue
        underline = SETEXT.match(line)
        if underline and len(lines) == 1:
            title = inline_plain(lines.pop())
            _heading(blocks, outline, 1 if underline.group(1)[0] == "=" else 2, title, None)
            continue
        if "|" in line and index < len(source) and "-" in source[index] and TABLE_RULE.match(source[index]):
            flush()  # a table: its header, its rule (dropped), its rows up to a line without "|"
            rows = [line]
            index += 1
            while index < len(source) and "|" in source[index] and source[index].strip():
                rows.append(source[index])
                index += 1
            for row in rows:
                cells = table_cells(row)
                if any(cells):
                    blocks.append(Block(ROW, CELL_JOIN.join(cells), outline.path(), None))
            continue
        item = LIST_ITEM.match(line)
        if item:
            flush()
            lines.append(item.group(1))
            continue
        lines.append(line)
    flush()
    return blocks


def _heading(blocks: list[Block], outline: Outline, level: int, text: str, page: int | None) -> None:
    """A heading, or a paragraph when it is too long to be one (or empty: nothing)."""
    if not text:
        return
    if len(text) > HEADING_MAX_CHARS:
        blocks.append(Block(PARAGRAPH, text, outline.path(), page))
        return
    block = outline.heading(level, text)
    blocks.append(Block(HEADING, text, block.headings, page))


# --- from the child's blocks ---------------------------------------------------------------------


def structured_blocks(raw: list[RawBlock]) -> list[Block]:
    """The child's blocks with their heading paths: headings by their level, a PDF's pages read for
    numbered headings."""
    outline = Outline()
    blocks: list[Block] = []
    for piece in raw:
        if piece.kind == "page":
            blocks.extend(numbered_blocks(piece.text, piece.page, outline))
        elif piece.kind == "heading":
            _heading(blocks, outline, piece.level, piece.text, piece.page)
        elif piece.kind == "row":
            blocks.append(Block(ROW, piece.text, outline.path(), piece.page))
        else:
            paragraph_add(blocks, outline, piece.text, piece.page)
    return blocks


def _title(blocks: list[Block]) -> str:
    """The first heading of the outermost level found, or ""."""
    headings = [block for block in blocks if block.kind == HEADING and not block.headings]
    return headings[0].text if headings else ""


def document_parse(*, data: bytes, max_chars: int | None = None, max_pages: int | None = None) -> ParsedDocument:
    """The document in `data`, its type read from its content, with its structure; ParseFailed
    (with the reason staff read) when it is not one we read, cannot be read within the limits, is
    over KNOWLEDGE_MAX_CHARS characters or KNOWLEDGE_MAX_PAGES pages, or has no text."""
    max_chars = settings.KNOWLEDGE_MAX_CHARS if max_chars is None else max_chars
    max_pages = settings.KNOWLEDGE_MAX_PAGES if max_pages is None else max_pages
    kind = document_kind(data)
    if kind is None:
        raise ParseFailed("type", str(MSG_TYPE))
    title, pages = "", None
    if kind in (PDF, DOCX, HTML):
        payload = data if kind != HTML else text_decoded(data).encode("utf-8")
        try:
            structured = document_blocks(data=payload, kind=kind, max_chars=max_chars, max_pages=max_pages)
        except DocumentRefused as exc:
            raise ParseFailed(exc.reason, exc.message) from exc
        if structured.cut:
            raise ParseFailed("chars", str(MSG_CHARS).format(max_chars=max_chars))
        blocks = structured_blocks(structured.blocks)
        title, pages = structured.title, structured.pages
    else:
        text = text_decoded(data)
        if len(text) > max_chars:
            raise ParseFailed("chars", str(MSG_CHARS).format(max_chars=max_chars))
        blocks = markdown_blocks(text) if kind == MARKDOWN else numbered_blocks(text, None, Outline())
    if not any(block.kind != HEADING for block in blocks):
        raise ParseFailed("empty", str(MSG_EMPTY))
    # A PDF printed from Word is titled after the file: 「Microsoft Word - 学生手册.docx」.
    title = re.sub(r"^Microsoft Word - |\.docx?$", "", title).strip()
    return ParsedDocument(kind=kind, title=title or _title(blocks), pages=pages, blocks=tuple(blocks))

