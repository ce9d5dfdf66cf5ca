"""A parsed document cut into passages, as search finds them and the agent cites them
(docs/knowledge.md#how-documents-are-read-and-cut).

The algorithm, over the blocks of knowledge_app.parsing in order:

1. **Sections**: a heading starts one; its path is the headings above it and itself. A section's
   body is its paragraphs and table rows; a heading with no body gives no passage when headings
   below it follow (they carry its name in their path), and is its parent's text when none do
   (「一、品德优良」 in a list of conditions is a line of text, not lost).
2. **Pieces**: a paragraph up to PASSAGE_MAX_CHARS is one piece; a longer one is cut at Chinese
   and Western sentence ends (。！？； ! ? ;, closing quotes kept with their sentence) into
   pieces of about PASSAGE_TARGET_CHARS; a sentence longer than PASSAGE_MAX_CHARS is cut at a
   comma, or where it must. A table's rows are pieces too.
3. **Packing**: within a section, short consecutive paragraphs are merged (while the passage is
   under PASSAGE_MIN_CHARS and the next piece still fits under PASSAGE_MAX_CHARS); a table's rows
   are kept together (with a short paragraph before them) up to PASSAGE_MAX_CHARS, and a table cut in several passages repeats its
   header row at the top of each. No passage crosses a heading, and none is over PASSAGE_MAX_CHARS.
4. Each passage carries its section's heading path joined as 「第三章 学籍管理 › 第二十条」 (at
   most HEADING_PATH_MAX_CHARS, the outermost headings dropped first) and the page it starts on.

Deterministic: the same blocks give the same passages.
"""

import re
from dataclasses import dataclass

from knowledge_app.parsing import HEADING, ROW, Block

# Sizes in characters (a Chinese character is about one token for the embedding models we
# target: bge-m3, text-embedding-v4). One article of a Chinese regulation is typically 100–400
# characters: a passage of that size answers one question and is cited whole. Much shorter and a
# passage loses its context (keyword scores of a 30-character passage are noise); much longer and
# it dilutes both the keyword score and the vector, and five of them no longer fit a tool result
# the model reads comfortably (5 × 600 ≈ 3,000 characters).
PASSAGE_MIN_CHARS = 200  # short paragraphs are merged until a passage reaches this
PASSAGE_TARGET_CHARS = 400  # a long paragraph is cut into pieces of about this
PASSAGE_MAX_CHARS = 600  # no passage is longer
HEADING_SEPARATOR = " › "
HEADING_PATH_MAX_CHARS = 500  # KnowledgePassage.heading's max_length
PIECE_JOIN = "\n"

SENTENCE = re.compile(r"[^。！？；!?;]*(?:[。！？；!?;]+[”’」』）)\"']*|$)")
SOFT_BREAK = re.compile(r"[，、,：:\s]")


@dataclass(frozen=True)
class Passage:
    """One passage: `seq` its order in the document from 1, `text` what search reads and the
    agent quotes, `heading` the heading path joined by " › " ("" when none), `page` the page it
    starts on (None for formats without pages)."""

    seq: int
    text: str
    heading: str
    page: int | None


@dataclass
class _Piece:
    text: str
    page: int | None
    row: bool = False


def heading_joined(path: tuple[str, ...]) -> str:
    """「第三章 学籍管理 › 第二十条」, at most HEADING_PATH_MAX_CHARS: the outermost headings
    dropped first (the nearest says most about the passage), a lone heading cut."""
    path = list(path)
    joined = HEADING_SEPARATOR.join(path)
    while len(joined) > HEADING_PATH_MAX_CHARS and len(path) > 1:
        path.pop(0)
        joined = "…" + HEADING_SEPARATOR + HEADING_SEPARATOR.join(path)
    return joined[:HEADING_PATH_MAX_CHARS]


def sentences_of(text: str) -> list[str]:
    """The sentences of `text`, each with its end mark and closing quotes; together they are
    `text`."""
    return [found for found in SENTENCE.findall(text) if found]


def _hard_cut(sentence: str) -> list[str]:
    """A sentence over PASSAGE_MAX_CHARS cut in parts of at most PASSAGE_TARGET_CHARS, each at the
    last comma or space in the second half of its window, else at the window's end."""
    parts = []
    while len(sentence) > PASSAGE_MAX_CHARS:
        window = sentence[:PASSAGE_TARGET_CHARS]
        breaks = [found.end() for found in SOFT_BREAK.finditer(window) if found.end() > PASSAGE_TARGET_CHARS // 2]
        cut = breaks[-1] if breaks else PASSAGE_TARGET_CHARS
        parts.append(sentence[:cut])
        sentence = sentence[cut:]
    return [*parts, sentence] if sentence else parts


def paragraph_cut(text: str) -> list[str]:
    """A paragraph as pieces of at most PASSAGE_MAX_CHARS, cut at sentence ends: sentences are
    gathered until a piece reaches PASSAGE_TARGET_CHARS (or the next would pass the cap); a last
    piece under PASSAGE_MIN_CHARS joins the one before when both fit."""
    if len(text) <= PASSAGE_MAX_CHARS:
        return [text]
    pieces: list[str] = []
    current = ""
    for sentence in sentences_of(text):
        for part in _hard_cut(sentence) if len(sentence) > PASSAGE_MAX_CHARS else [sentence]:
            if current and len(current) + len(part) > PASSAGE_MAX_CHARS:
                pieces.append(current)
                current = ""
            current += part
            if len(current) >= PASSAGE_TARGET_CHARS:
                pieces.append(current)
                current = ""
    if current:
        if pieces and len(current) < PASSAGE_MIN_CHARS and len(pieces[-1]) + len(current) <= PASSAGE_MAX_CHARS:
            pieces[-1] += current
        else:
            pieces.append(current)
    return [piece.strip() for piece in pieces if piece.strip()]


def _packed(pieces: list[_Piece]) -> list[_Piece]:
    """A section's pieces as passages (step 3 of the module's docstring)."""
    passages: list[_Piece] = []
    current: _Piece | None = None
    header: str | None = None  # the header row of the table being packed
    for piece in pieces:
        if piece.row and (current is None or not current.row):
            header = piece.text if len(piece.text) <= PASSAGE_MAX_CHARS // 3 else None
        fits = current is not None and len(current.text) + len(PIECE_JOIN) + len(piece.text) <= PASSAGE_MAX_CHARS
        # A table's rows fill a passage; anything fills a short one (a heading's short paragraphs,
        # the sentence that introduces a table).
        if fits and (current.row and piece.row or len(current.text) < PASSAGE_MIN_CHARS):
            current.text += PIECE_JOIN + piece.text
            current.row = piece.row
            continue
        if current is not None:
            passages.append(current)
        if piece.row and current is not None and current.row and header and piece.text != header:
            text = header + PIECE_JOIN + piece.text
            if len(text) <= PASSAGE_MAX_CHARS:  # a table's later passages start with its header
                current = _Piece(text, piece.page, True)
                continue
        current = _Piece(piece.text, piece.page, piece.row)
    if current is not None:
        passages.append(current)
    return passages


def passages_cut(blocks: tuple[Block, ...] | list[Block]) -> list[Passage]:
    """The passages of a document's blocks (knowledge_app.parsing.ParsedDocument.blocks), in order."""
    sections: list[tuple[tuple[str, ...], list[_Piece]]] = []  # consecutive text under one heading path
    empty: Block | None = None  # the heading just read, while no text has followed it

    def add(path: tuple[str, ...], pieces: list[_Piece]) -> None:
        if not sections or sections[-1][0] != path:
            sections.append((path, []))
        sections[-1][1].extend(pieces)

    for block in blocks:
        if block.kind == HEADING:
            if empty is not None and block.headings[: len(empty.headings) + 1] != (*empty.headings, empty.text):
                add(empty.headings, [_Piece(empty.text, empty.page)])  # a heading nothing was under
            empty = block
            continue
        empty = None
        add(block.headings, [_Piece(part, block.page, block.kind == ROW) for part in paragraph_cut(block.text)])
    if empty is not None:
        add(empty.headings, [_Piece(empty.text, empty.page)])
    out: list[Passage] = []
    for path, pieces in sections:
        heading = heading_joined(path)
        for passage in _packed(pieces):
            out.append(Passage(len(out) + 1, passage.text, heading, passage.page))
    return out
