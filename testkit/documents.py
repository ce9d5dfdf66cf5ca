"""Files built for the tests of attachments and document parsing, with the libraries that read
them (pypdf and PDFium read what is written here by hand, python-docx writes the Word files):
ordinary ones, and the hostile ones of issue 42 — a DOCX whose `document.xml` is tens of
megabytes under the zip-bomb ratio, a PDF of empty `() Tj` operators, images whose header
declares 20,000 × 20,000 pixels — and of issue 45, a PDF whose content unpacks to more memory
than the parser may have."""

import functools
import io
import random
import struct
import zipfile
import zlib


def _pdf_written(objects: list[bytes], *, version: bytes, trailer: bytes = b"") -> bytes:
    """A PDF file of these objects (numbered from 1, the catalog first), its cross-reference table
    and trailer."""
    out, offsets = io.BytesIO(), []
    out.write(b"%%PDF-%s\n" % version)
    for number, body in enumerate(objects, 1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    out.write(b"".join(b"%010d 00000 n \n" % o for o in offsets))
    out.write(b"trailer\n<< /Size %d /Root 1 0 R%s >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, trailer, xref))
    return out.getvalue()

def pdf_of(contents: list[bytes], *, javascript: bool = False) -> bytes:
    """A PDF with a page per content stream (Flate-compressed), in Helvetica, written by hand."""
    pages = len(contents)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R" + (b" /OpenAction 3 0 R" if javascript else b"") + b" >>",
        b"<< /Type /Pages /Kids [" + b" ".join(b"%d 0 R" % (5 + i) for i in range(pages)) + b"] /Count %d >>" % pages,
        b"<< /S /JavaScript /JS (app.alert('x')) >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    streams = []
    for index, content in enumerate(contents):
        packed = zlib.compress(content)
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R"
            b" /Resources << /Font << /F1 4 0 R >> >> >>" % (5 + pages + index)
        )
        streams.append(b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(packed) + packed + b"\nendstream")
    return _pdf_written([*objects, *streams], version=b"1.4")


def pdf_with(text: str, *, javascript: bool = False) -> bytes:
    """A one-page PDF whose page shows `text`."""
    return pdf_of([f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()], javascript=javascript)


def pdf_of_lines(pages: list[list[str]], *, title: str = "") -> bytes:
    """A PDF whose pages show these lines, in any script (Chinese included), as a word processor
    writes one: a Type0 font with Identity-H codes and a ToUnicode map, which is what a text
    extractor reads (the glyphs themselves are not embedded: no viewer is asked to draw them).
    Written by hand, so the tests need no PDF-writing library and no font file."""
    chars = sorted({c for page in pages for line in page for c in line})
    code = {c: i + 1 for i, c in enumerate(chars)}
    entries = []
    for start in range(0, len(chars), 100):  # a bfchar section holds at most 100 entries
        chunk = chars[start : start + 100]
        entries.append(f"{len(chunk)} beginbfchar")
        entries += [f"<{code[c]:04X}> <{c.encode('utf-16-be').hex().upper()}>" for c in chunk]
        entries.append("endbfchar")
    cmap = (
        "/CIDInit /ProcSet findresource begin 12 dict begin begincmap /CIDSystemInfo << /Registry (Adobe)"
        " /Ordering (UCS) /Supplement 0 >> def /CMapName /Adobe-Identity-UCS def /CMapType 2 def"
        " 1 begincodespacerange <0000> <FFFF> endcodespacerange\n"
        + "\n".join(entries)
        + "\nendcmap CMapName currentdict /CMap defineresource pop end end"
    ).encode()
    count = len(pages)
    info = "<" + ("\ufeff" + title).encode("utf-16-be").hex() + ">" if title else "()"
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [" + b" ".join(b"%d 0 R" % (8 + i) for i in range(count)) + b"] /Count %d >>" % count,
        b"<< /Type /Font /Subtype /Type0 /BaseFont /NotoSansCJKsc-Regular /Encoding /Identity-H"
        b" /DescendantFonts [4 0 R] /ToUnicode 5 0 R >>",
        b"<< /Type /Font /Subtype /CIDFontType0 /BaseFont /NotoSansCJKsc-Regular /CIDSystemInfo"
        b" << /Registry (Adobe) /Ordering (Identity) /Supplement 0 >> /FontDescriptor 6 0 R /DW 1000 >>",
        b"<< /Length %d >>\nstream\n" % len(cmap) + cmap + b"\nendstream",
        b"<< /Type /FontDescriptor /FontName /NotoSansCJKsc-Regular /Flags 4 /FontBBox [0 -120 1000 880]"
        b" /ItalicAngle 0 /Ascent 880 /Descent -120 /CapHeight 700 /StemV 80 >>",
        b"<< /Title " + info.encode() + b" >>",
    ]
    streams = []
    for index, page in enumerate(pages):
        operators = [b"BT /F1 12 Tf 16 TL 50 800 Td"]
        operators += [b"<" + "".join(f"{code[c]:04X}" for c in line).encode() + b"> Tj T*" for line in page]
        packed = zlib.compress(b"\n".join([*operators, b"ET"]))
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Contents %d 0 R"
            b" /Resources << /Font << /F1 3 0 R >> >> >>" % (8 + count + index)
        )
        streams.append(b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(packed) + packed + b"\nendstream")
    return _pdf_written([*objects, *streams], version=b"1.7", trailer=b" /Info 7 0 R")


def pdf_encrypted(text: str = "Hello", *, password: str = "secret") -> bytes:
    """A one-page PDF encrypted with a user password (pypdf writes it)."""
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf_with(text))))
    writer.encrypt(password, algorithm="AES-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def docx_zip_bomb(megabytes: int = 40) -> bytes:
    """A Word file with an extra member of `megabytes` of zeros, packed at a ratio of about 1,000
    (the zip-bomb check refuses past 200)."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(docx_with("x")), "r") as plain, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as bomb:
        for member in plain.infolist():
            bomb.writestr(member.filename, plain.read(member))
        bomb.writestr("word/media/zeros.bin", bytes(megabytes * 1024 * 1024))
    return out.getvalue()


@functools.cache
def pdf_of_empty_shows(*, pages: int, per_page: int) -> bytes:
    """The attack: pages of nothing but empty `() Tj` operators, which pypdf's text extraction
    walks one by one (30 pages × 300,000 took a worker 68 s)."""
    return pdf_of([b"BT /F1 12 Tf " + b"() Tj " * per_page + b"ET"] * pages)


@functools.cache
def pdf_of_huge_content(megabytes: int) -> bytes:
    """The attack on a parser written in C++ (PDFium): a page whose content stream, a few hundred
    KB packed, unpacks to `megabytes` of text operators, which the parser holds in memory whole."""
    show = b"(abcdefgh) Tj "
    return pdf_of([b"BT /F1 12 Tf " + show * (megabytes * 1024 * 1024 // len(show)) + b"ET"])


def docx_with(*paragraphs: str) -> bytes:
    """A Word file with these paragraphs and a one-row table (周一 | 高数)."""
    from docx import Document

    document = Document()
    for paragraph in paragraphs:
        document.add_paragraph(paragraph)
    table = document.add_table(rows=1, cols=2)
    table.rows[0].cells[0].text, table.rows[0].cells[1].text = "周一", "高数"
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


@functools.cache
def docx_of_huge_body(megabytes: float) -> bytes:
    """The attack: a real Word file whose `document.xml` is `megabytes` of one-word paragraphs,
    varied enough to pack at a ratio of about 8 (the zip-bomb check refuses past 200)."""
    words = random.Random(42)
    vocabulary = ["".join(words.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(6)).encode() for _ in range(5000)]
    count = int(megabytes * 1024 * 1024) // len(b"<w:p><w:r><w:t>abcdef</w:t></w:r></w:p>")
    body = b"".join(b"<w:p><w:r><w:t>" + words.choice(vocabulary) + b"</w:t></w:r></w:p>" for _ in range(count))
    xml = (
        b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
        b'<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>'
        + body
        + b"</w:body></w:document>"
    )
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(docx_with())) as plain, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as huge:
        for member in plain.infolist():
            huge.writestr(member.filename, xml if member.filename == "word/document.xml" else plain.read(member))
    return out.getvalue()


# --- images: real headers, declaring the size asked for -------------------------------------------


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_declaring(width: int, height: int, *, data_bytes: int = 0) -> bytes:
    """A greyscale PNG that says `width` × `height`; its pixel data is `data_bytes` of random rows
    (a file of that size; the rest of the rows are missing) or one row of zeros."""
    rows = max(1, data_bytes // (width + 1))
    raw = b"".join(b"\x00" + (random.randbytes(width) if data_bytes else bytes(width)) for _ in range(rows))
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
        + _png_chunk(b"IDAT", zlib.compress(raw))
        + _png_chunk(b"IEND", b"")
    )


def gif_declaring(width: int, height: int, *, frame: tuple[int, int, int, int] | None = None) -> bytes:
    """A GIF whose logical screen is `width` × `height`, with one 1 × 1 frame, or with the frame
    `frame` (left, top, width, height) placed on it."""
    left, top, frame_width, frame_height = frame or (0, 0, 1, 1)
    return (
        b"GIF89a"
        + struct.pack("<HHBBB", width, height, 0x80, 0, 0)
        + b"\x00\x00\x00\xff\xff\xff"
        + b","
        + struct.pack("<HHHHB", left, top, frame_width, frame_height, 0)
        + b"\x02\x02\x44\x01\x00;"
    )


def jpeg_declaring(width: int, height: int) -> bytes:
    """A baseline JPEG's markers up to its frame header (JFIF, a quantisation table, SOF0)."""
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    dqt = b"\xff\xdb" + struct.pack(">H", 67) + b"\x00" + bytes(range(1, 65))
    sof0 = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8" + app0 + dqt + sof0 + b"\xff\xd9"


def webp_declaring(width: int, height: int, kind: str) -> bytes:
    """A WebP's header in each of its three forms: lossy ("VP8 "), lossless ("VP8L"), extended ("VP8X")."""
    if kind == "VP8 ":
        chunk = b"\x00\x00\x00\x9d\x01\x2a" + struct.pack("<HH", width, height) + bytes(10)
    elif kind == "VP8L":
        chunk = b"\x2f" + ((width - 1) | (height - 1) << 14).to_bytes(4, "little") + bytes(5)
    else:
        chunk = b"\x00" * 4 + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    body = b"WEBP" + kind.encode() + struct.pack("<I", len(chunk)) + chunk
    return b"RIFF" + struct.pack("<I", len(body)) + body
