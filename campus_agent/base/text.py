"""Text from outside (a model, a sub-agent, an MCP server, a client) made valid, in one place.

Python strings can hold what nothing downstream accepts: a lone UTF-16 surrogate ("\\ud800", which
a JavaScript service sends when it cuts a string inside an emoji, and which JSON decodes without
complaint) cannot be encoded as UTF-8, so a frame, an HTTP body or a database write fails; U+0000
is refused by PostgreSQL text and jsonb. JSON parsed by Python may also hold NaN / Infinity,
which neither PostgreSQL's jsonb nor a browser's JSON.parse accepts.

`text_clean` is cheap when there is nothing to fix (most strings are checked in well under a
microsecond), so it can run per streamed chunk.
"""
import math
import re
import unicodedata

from django.utils.functional import Promise

REPLACEMENT = "\ufffd"
# Deeper data is not kept: no chart or tool argument needs it, and the JSON encoder, the
# database driver and this function would all hit Python's recursion limit on it.
MAX_DEPTH = 64


def text_valid(value: str) -> bool:
    """True when `value` holds no NUL and no lone surrogate (UTF-8 can encode it)."""
    if "\x00" in value:
        return False
    if value.isascii():  # O(1) in CPython: the string's own flag
        return True
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def _str_clean(value: str) -> str:
    if text_valid(value):
        return value
    value = value.replace("\x00", "")
    try:
        value.encode()
    except UnicodeEncodeError:
        # Round trip through UTF-16: a surrogate pair that arrived as two code points becomes the
        # character it encodes, a lone surrogate becomes U+FFFD.
        value = value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return value


def _clean(value, depth: int):
    if isinstance(value, str):
        return _str_clean(value)
    if isinstance(value, Promise):  # a gettext_lazy text of ours: in the language active now
        return _str_clean(str(value))
    if isinstance(value, dict):
        if depth <= 0:
            return None
        return {_str_clean(key) if isinstance(key, str) else key: _clean(item, depth - 1) for key, item in value.items()}
    if isinstance(value, list | tuple):
        if depth <= 0:
            return None
        return [_clean(item, depth - 1) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def text_clean(value):
    """`value` with every string in it (dict keys too, in nested dicts and lists) made valid:
    lone surrogates → U+FFFD, NUL dropped. NaN and ±Infinity become None, and containers nested
    deeper than MAX_DEPTH become None. A string that needs nothing is returned as is; dicts and
    lists are copied (tuples become lists, as JSON has them). A lazy translation becomes the text
    of the language active now (a run's events: the student's language, chat_app.runs.engine)."""
    return _clean(value, MAX_DEPTH)


# What a short label keeps of the characters Unicode calls "format" (Cf): the zero-width joiner
# and non-joiner, which emoji sequences (👩‍💻) and Persian and Indic scripts need. The others,
# and every control character, are dropped (docs/security.md#text-that-cannot-mislead).
_LABEL_FORMAT_KEPT = frozenset("\u200c\u200d")


def _label_line(line: str) -> str:
    if not line.isprintable():  # at C speed: no control, format or separator character (most text)
        line = "".join(
            c for c in line if c in _LABEL_FORMAT_KEPT or c.isspace() or unicodedata.category(c) not in ("Cc", "Cf", "Cs")
        )
    return " ".join(line.split())


def label_clean(value: str, *, multiline: bool = False) -> str:
    """A short text a person typed and others read (a key's name, a title, a feedback comment, a
    file's name, a name an identity provider gives) that cannot mislead its reader
    (docs/security.md#text-that-cannot-mislead): NFC; no bidi mark, embedding, override or isolate
    (U+202E shows what follows it reversed), no zero-width space, BOM or tag character, no other
    control character; every run of whitespace one space, trimmed. Line and paragraph separators
    (U+2028/2029, CR, LF …) are spaces too, or, with `multiline`, line breaks. CJK, emoji and their
    ZWJ sequences are kept as typed."""
    text = unicodedata.normalize("NFC", text_clean(value))
    if not multiline:
        return _label_line(text)
    return "\n".join(_label_line(line) for line in text.splitlines()).strip("\n")


_HEAD_END = re.compile(r"[：:，,。；;\n]")


def text_head(text: str, *, max_chars: int = 16) -> str | None:
    """The first clause of `text` ("食堂助手（演示）：食堂、菜单…" → "食堂助手（演示）") when it is
    2..max_chars characters, short enough to name a thing in a sentence; else None."""
    head = _HEAD_END.split(text or "", maxsplit=1)[0].strip()
    return head if 2 <= len(head) <= max_chars else None
