"""A long Chinese PDF for the benchmarks (issue 45): the demo handbook's 转专业管理规定 repeated
as the chapters of one 汇编, written by demo_app/knowledge/build.py's own code — the same A4
layout, 第X章 starting a page, "- N -" at the foot, a table per schedule, Noto Sans CJK SC cut
to the characters used and embedded as TrueType with a ToUnicode map, as a word processor's PDF
is. Articles are numbered on through the whole book (第一条 … 第四千三百二十一条), so every page
has the numbered headings knowledge_app/parsing.py looks for.

Building 1,000 pages takes fpdf2 about half a minute; the file is kept in the system's temporary
folder, named by its page count and build.py's own bytes, and built again only when either
changes."""
import hashlib
import re
import tempfile
from pathlib import Path

from demo_app.knowledge import DEMO_DOCUMENTS, build

DIGITS = "零一二三四五六七八九"
UNITS = ((1000, "千"), (100, "百"), (10, "十"))


def chinese_number(n: int) -> str:
    """1 → 一, 10 → 十, 21 → 二十一, 105 → 一百零五, 4321 → 四千三百二十一 (1–9999)."""
    out, rest, zero = "", n, False
    for value, unit in UNITS:
        digit, rest = divmod(rest, value)
        if digit:
            out += ("零" if zero else "") + ("" if value == 10 and digit == 1 and not out else DIGITS[digit]) + unit
            zero = False
        elif out:
            zero = True
    if rest:
        out += ("零" if zero else "") + DIGITS[rest]
    return out


ARTICLE = re.compile(r"^第[一二三四五六七八九十百]+条")


CHAPTER_BLOCKS = 60  # blocks (articles, tables) a chapter: about five full pages


def handbook(blocks: int) -> build.Handbook:
    """`blocks` of the demo's 转专业管理规定 (its articles and tables, over and over), renumbered,
    in chapters of CHAPTER_BLOCKS named as the demo's chapters in turn: full pages of text, as
    a long regulation has, rather than the demo's short chapters each on a page of its own."""
    source = next(d for d in DEMO_DOCUMENTS if d.path.suffix == ".pdf")
    demo = build.parse(source.source_path)
    pieces = [(chapter.heading, block) for chapter in demo.chapters for block in chapter.blocks]
    book = build.Handbook("转专业管理规定汇编（示例）", demo.note, [])
    article = 0
    for index in range(blocks):
        heading, block = pieces[index % len(pieces)]
        if index % CHAPTER_BLOCKS == 0:
            number = len(book.chapters) + 1
            heading = re.sub(r"^第[一二三四五六七八九十]+章", f"第{chinese_number(number)}章", heading)
            book.chapters.append(build.Chapter(heading))
        if not build.is_table(block) and ARTICLE.match(block[0]):
            article += 1
            block = [ARTICLE.sub(f"第{chinese_number(article)}条", block[0]), *block[1:]]
        book.chapters[-1].blocks.append(block)
    return book


def pdf_pages(data: bytes) -> int:
    import pypdfium2

    document = pypdfium2.PdfDocument(data)
    try:
        return len(document)
    finally:
        document.close()


def handbook_pdf(pages: int) -> bytes:
    """A PDF of exactly `pages` pages (its last chapter cut short to fit: each chapter starts a page)."""
    stamp = hashlib.sha256(Path(build.__file__).read_bytes() + Path(__file__).read_bytes()).hexdigest()[:12]
    cached = Path(tempfile.gettempdir()) / f"campus-bench-handbook-{pages}-{stamp}.pdf"
    if cached.exists():
        return cached.read_bytes()
    # About 10 blocks a page: a first guess, then corrected by what each build gave.
    blocks, tried = pages * 10, {}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "handbook.pdf"
        while blocks not in tried and len(tried) < 8:
            build.build_pdf(handbook(blocks), out)
            got = tried[blocks] = pdf_pages(out.read_bytes())
            if got == pages:
                break
            blocks = max(1, round(blocks * pages / got) if abs(pages - got) > 2 else blocks + (1 if got < pages else -1))
        else:
            raise RuntimeError(f"{pages} pages asked, {tried} built")
        data = out.read_bytes()
    cached.write_bytes(data)
    return data
