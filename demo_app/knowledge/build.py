"""Builds the demo handbook's PDF and DOCX from their Markdown (a dev tool, run by hand after
editing src/*.md; the generated files are committed):

    .venv/bin/python -m demo_app.knowledge.build

- src/transfer-major.md → transfer-major.pdf: A4, each 第X章 starting a page, a "- N -" page
  number at the foot, the schedule as a table; the text in Noto Sans CJK SC (Debian's
  fonts-noto-cjk), a subset of only the characters used.
- src/scholarship.md → scholarship.docx: the title in the Title style, each 第X章 in Heading 1,
  articles as paragraphs (第X条 in bold, items one paragraph each), the amounts as a real table.

The font: fpdf2 can read the .ttc, but Noto CJK's outlines are CFF, which fpdf2 embeds with an
encoding CMap of its own that pypdf does not read (every character comes out with a space and a
NUL around it). So the characters used are cut out of the .ttc with fontTools and their outlines
converted to TrueType (the recipe of fontTools' Snippets/otf2ttf.py), which fpdf2 embeds as
Identity-H with a ToUnicode map: pypdf, pdfminer and poppler all read it back as written.

The Markdown is the subset the documents use: `# title`, `> note`, `## 第X章 …`, one paragraph per
article (its items on the following lines, no blank line between), and `| … |` tables."""
from __future__ import annotations

import datetime as dt
import io
import os
import re
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from demo_app.knowledge import DEMO_DOCUMENTS, KNOWLEDGE_DIR

FONT_DIR = Path("/usr/share/fonts/opentype/noto")
REGULAR, BOLD = FONT_DIR / "NotoSansCJK-Regular.ttc", FONT_DIR / "NotoSansCJK-Bold.ttc"
SC_INDEX = 2  # in Noto's .ttc files: JP, KR, SC, TC, HK, then the Mono ones
BUILT_AT = dt.datetime(2026, 9, 1, tzinfo=dt.UTC)  # fixed, so a rebuild of unchanged text changes nothing
ARTICLE = re.compile(r"^(第[一二三四五六七八九十百]+条)\u3000")


@dataclass
class Chapter:
    heading: str
    blocks: list[list[str] | list[list[str]]] = field(default_factory=list)  # article lines, or table rows


@dataclass
class Handbook:
    title: str
    note: str
    chapters: list[Chapter]

    def text(self) -> str:
        """Every character that is printed (the font subset needs them)."""
        parts = [self.title, self.note]
        for chapter in self.chapters:
            parts.append(chapter.heading)
            for block in chapter.blocks:
                parts.extend(cell for row in block for cell in (row if isinstance(row, list) else [row]))
        return "".join(parts)


def is_table(block) -> bool:
    return bool(block) and isinstance(block[0], list)


def parse(path: Path) -> Handbook:
    """The Markdown of one document, as its title, note and chapters of blocks."""
    title, note, chapters = "", "", []
    for raw in re.split(r"\n\s*\n", path.read_text(encoding="utf-8").strip()):
        lines = [line.strip() for line in raw.strip().splitlines()]
        if lines[0].startswith("# "):
            title = lines[0][2:].strip()
        elif lines[0].startswith("> "):
            note = " ".join(line[2:].strip() for line in lines)
        elif lines[0].startswith("## "):
            chapters.append(Chapter(lines[0][3:].strip()))
        elif lines[0].startswith("|"):
            rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]
            chapters[-1].blocks.append([row for row in rows if not set("".join(row)) <= set("-: ")])
        else:
            chapters[-1].blocks.append(lines)
    return Handbook(title, note, chapters)


def cjk_truetype(ttc: Path, text: str, out: Path) -> Path:
    """The glyphs of `text` from the SC face of a Noto CJK .ttc, as a TrueType-outlined .ttf."""
    from fontTools.pens.cu2quPen import Cu2QuPen
    from fontTools.pens.ttGlyphPen import TTGlyphPen
    from fontTools.subset import Options, Subsetter
    from fontTools.ttLib import TTFont, newTable

    font = TTFont(ttc, fontNumber=SC_INDEX)
    options = Options()
    options.layout_features, options.hinting, options.desubroutinize, options.name_IDs = [], False, True, ["*"]
    subsetter = Subsetter(options)
    subsetter.populate(text=text)
    subsetter.subset(font)

    order, glyphs = font.getGlyphOrder(), font.getGlyphSet()
    glyf = newTable("glyf")
    glyf.glyphOrder, glyf.glyphs = order, {}
    for name in order:
        pen = TTGlyphPen(glyphs)
        glyphs[name].draw(Cu2QuPen(pen, max_err=1.0, reverse_direction=True))
        glyf[name] = pen.glyph()
    del font["CFF "]
    if "VORG" in font:
        del font["VORG"]
    font["loca"], font["glyf"] = newTable("loca"), glyf
    maxp = font["maxp"] = newTable("maxp")
    maxp.tableVersion, maxp.maxZones = 0x00010000, 1
    for name in ("maxTwilightPoints", "maxStorage", "maxFunctionDefs", "maxInstructionDefs",
                 "maxStackElements", "maxSizeOfInstructions", "maxComponentElements"):
        setattr(maxp, name, 0)
    post = font["post"]
    post.formatType, post.extraNames, post.mapping, post.glyphOrder = 2.0, [], {}, order
    font["head"].glyphDataFormat = 0
    font.sfntVersion = "\x00\x01\x00\x00"
    font.save(out)
    return out


def build_pdf(book: Handbook, out: Path) -> None:
    from fpdf import FPDF
    from fpdf.enums import Align, WrapMode, XPos, YPos

    # CHAR: Chinese wraps between any two characters, not only at the spaces fpdf2 looks for
    NEXT_LINE = {"new_x": XPos.LMARGIN, "new_y": YPos.NEXT, "wrapmode": WrapMode.CHAR}

    class Pdf(FPDF):
        def footer(self):
            self.set_y(-15)
            self.set_font("cjk", size=9)
            self.cell(0, 10, f"- {self.page_no()} -", align=Align.C)

    text = book.text() + "- 0123456789"
    with tempfile.TemporaryDirectory() as tmp:
        pdf = Pdf(format="A4")
        pdf.set_margins(22, 20, 22)
        pdf.set_auto_page_break(True, margin=22)
        pdf.add_font("cjk", "", cjk_truetype(REGULAR, text, Path(tmp) / "regular.ttf"))
        pdf.add_font("cjk", "B", cjk_truetype(BOLD, text, Path(tmp) / "bold.ttf"))
        pdf.set_title(book.title)
        pdf.set_author("示例大学")
        pdf.set_creator("demo_app/knowledge/build.py")
        pdf.set_creation_date(BUILT_AT)
        pdf.set_lang("zh-CN")

        for number, chapter in enumerate(book.chapters):
            if number == 0:
                pdf.add_page()
                pdf.set_font("cjk", "B", 18)
                pdf.multi_cell(0, 12, book.title, align=Align.C, **NEXT_LINE)
                pdf.set_font("cjk", "", 9)
                pdf.multi_cell(0, 6, book.note, align=Align.C, **NEXT_LINE)
                pdf.ln(6)
            else:
                pdf.add_page()
            pdf.set_font("cjk", "B", 14)
            pdf.multi_cell(0, 10, chapter.heading, align=Align.C, **NEXT_LINE)
            pdf.ln(2)
            for block in chapter.blocks:
                if is_table(block):
                    pdf.set_font("cjk", "", 10)
                    with pdf.table(text_align="CENTER", line_height=7) as table:
                        for row in block:
                            cells = table.row()
                            for cell in row:
                                cells.cell(cell)
                else:
                    pdf.set_font("cjk", "", 11)
                    for line in block:
                        pdf.multi_cell(0, 7, line, align=Align.L, **NEXT_LINE)
                pdf.ln(2)
        pdf.output(str(out))


def build_docx(book: Handbook, out: Path) -> None:
    from docx import Document
    from docx.enum.text import WD_ALIGN_PARAGRAPH
    from docx.oxml.ns import qn
    from docx.shared import Pt

    doc = Document()
    for style in ("Normal", "Title", "Heading 1"):
        fonts = doc.styles[style].element.get_or_add_rPr().get_or_add_rFonts()
        fonts.set(qn("w:eastAsia"), "宋体" if style == "Normal" else "黑体")
    doc.core_properties.title = book.title
    doc.core_properties.author = "示例大学"
    doc.core_properties.created = doc.core_properties.modified = BUILT_AT.replace(tzinfo=None)
    doc.core_properties.last_modified_by = "demo_app/knowledge/build.py"

    doc.add_paragraph(book.title, style="Title").alignment = WD_ALIGN_PARAGRAPH.CENTER
    note = doc.add_paragraph()
    note.add_run(book.note).font.size = Pt(9)
    note.alignment = WD_ALIGN_PARAGRAPH.CENTER
    for chapter in book.chapters:
        doc.add_heading(chapter.heading, level=1)
        for block in chapter.blocks:
            if is_table(block):
                table = doc.add_table(rows=0, cols=len(block[0]))
                table.style = "Table Grid"
                for index, row in enumerate(block):
                    cells = table.add_row().cells
                    for cell, value in zip(cells, row, strict=True):
                        cell.text = value
                        if index == 0:
                            cell.paragraphs[0].runs[0].bold = True
                continue
            first, *items = block
            paragraph = doc.add_paragraph()
            if article := ARTICLE.match(first):
                paragraph.add_run(article.group(1)).bold = True
                paragraph.add_run(first[len(article.group(1)):])
            else:
                paragraph.add_run(first)
            for item in items:
                doc.add_paragraph(item).paragraph_format.left_indent = Pt(21)
    buffer = io.BytesIO()
    doc.save(buffer)
    # python-docx stamps each part with the time: repacked with BUILT_AT, unchanged text, same bytes
    with zipfile.ZipFile(buffer) as packed, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as repacked:
        for info in packed.infolist():
            stamped = zipfile.ZipInfo(info.filename, BUILT_AT.timetuple()[:6])
            stamped.compress_type = zipfile.ZIP_DEFLATED
            repacked.writestr(stamped, packed.read(info))


BUILDERS = {".pdf": build_pdf, ".docx": build_docx}


def main() -> int:
    # fontTools stamps the fonts it saves with this rather than the time: unchanged text, same bytes
    os.environ["SOURCE_DATE_EPOCH"] = str(int(BUILT_AT.timestamp()))
    for document in DEMO_DOCUMENTS:
        builder = BUILDERS.get(document.path.suffix)
        if builder is None:
            continue
        book = parse(document.source_path)
        assert book.title == document.title, (book.title, document.title)
        builder(book, document.path)
        print(f"{document.path.relative_to(KNOWLEDGE_DIR)}: {document.path.stat().st_size // 1024} KB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
