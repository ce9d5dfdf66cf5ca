"""An uploaded image's width and height, read from its header (docs/security.md#documents-parsed-under-limits).

The pixel cap (UPLOAD_IMAGE_MAX_PIXELS) is checked without decoding a pixel: a 1 MB file may
declare 20,000 × 20,000, which whoever decodes it (the model's provider, the student's browser)
would unpack to 1.6 GB. A header that cannot be read is no image we keep. The walks through a
JPEG's segments and a GIF's blocks are bounded, so a file made of tiny blocks costs little.
"""

import struct

JPEG_MAX_SEGMENTS = 1000  # before the frame header; a camera's JPEG has a few dozen
GIF_MAX_BLOCKS = 100_000  # 10 MB in 255-byte sub-blocks is about 41,000
# JPEG's frame headers (SOF0–SOF15), less DHT, JPG and DAC, which share the range.
JPEG_FRAMES = set(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
JPEG_STANDALONE = {0x01, *range(0xD0, 0xD9)}  # TEM, RSTn, SOI: no length follows


def _png(data: bytes) -> tuple[int, int] | None:
    return struct.unpack(">II", data[16:24]) if data[12:16] == b"IHDR" else None


def _jpeg(data: bytes) -> tuple[int, int] | None:
    position = 2
    for _ in range(JPEG_MAX_SEGMENTS):
        if data[position] != 0xFF:
            return None
        while data[position] == 0xFF:  # a marker, after any fill bytes
            position += 1
        marker = data[position]
        position += 1
        if marker in JPEG_FRAMES:
            height, width = struct.unpack(">HH", data[position + 3 : position + 7])
            return width, height
        if marker not in JPEG_STANDALONE:
            position += struct.unpack(">H", data[position : position + 2])[0]
    return None


def _webp(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8 " and data[23:26] == b"\x9d\x01\x2a":
        width, height = struct.unpack("<HH", data[26:30])
        return width & 0x3FFF, height & 0x3FFF
    if chunk == b"VP8L" and data[20] == 0x2F:
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X":
        return int.from_bytes(data[24:27], "little") + 1, int.from_bytes(data[27:30], "little") + 1
    return None


def _gif(data: bytes) -> tuple[int, int] | None:
    """The logical screen, grown to hold every frame (as Pillow and browsers grow it)."""
    width, height, flags = struct.unpack("<HHB", data[6:11])
    position = 13 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0)  # after the global colour table
    blocks = 0  # frames, extensions and their sub-blocks
    while blocks <= GIF_MAX_BLOCKS and position < len(data) and data[position] != 0x3B:  # to the trailer
        blocks += 1
        introducer = data[position]
        if introducer == 0x2C:  # a frame: its place and size, its colour table, its first data byte
            left, top, frame_width, frame_height, flags = struct.unpack("<HHHHB", data[position + 1 : position + 10])
            width, height = max(width, left + frame_width), max(height, top + frame_height)
            position += 10 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0) + 1
        elif introducer == 0x21:  # an extension: its label
            position += 2
        else:
            return None
        while blocks <= GIF_MAX_BLOCKS and position < len(data) and data[position]:  # up to the empty sub-block
            position += data[position] + 1
            blocks += 1
        position += 1
    return (width, height) if blocks <= GIF_MAX_BLOCKS else None  # a cut file's size is what it showed


_READERS = {"image/png": _png, "image/jpeg": _jpeg, "image/webp": _webp, "image/gif": _gif}


def image_size(data: bytes, content_type: str) -> tuple[int, int] | None:
    """(width, height) as the image's header declares them; None when it cannot be read."""
    try:
        size = _READERS[content_type](data)
    except (struct.error, IndexError):
        return None
    return size if size and all(size) else None
