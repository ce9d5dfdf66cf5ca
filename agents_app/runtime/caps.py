"""Caps on what comes into a turn from outside (issue 20): the model's answer, its tool calls,
tool results, stored rows sent back as history, usage figures. Each cap is a setting
(settings.py, "caps"); the texts the model or the student reads when one is hit are here.
docs/runtime.md, "Caps", lists them with their outcomes."""
from __future__ import annotations

from django.conf import settings

# A cut text ends with this, so the model (and a reader of the stored row) knows it was cut.
CUT_MARKER = "…（已截断，省略 {omitted} 字节）…"
TAIL_BYTES = 512
# The largest count a usage column holds (PostgreSQL `integer`, and what we sum into).
USAGE_MAX = 2**31 - 1
# The model's stream may be this many times LLM_MAX_REPLY_BYTES on the wire: the chunks' JSON
# envelopes (a few hundred bytes per piece of text), tool-call fragments and whatever else it
# sends. Past it the stream is cut even when it carried little text (junk, one endless line).
WIRE_BYTES_PER_REPLY_BYTE = 8


def utf8_size(text: str) -> int:
    """UTF-8 bytes of `text` (cheap for ASCII: no copy)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def text_cap(text: str, max_bytes: int) -> str:
    """`text` when it fits in `max_bytes` UTF-8 bytes; else its head and its tail, cut on
    character boundaries, with CUT_MARKER between saying how many bytes were left out. The tail
    (an eighth of the cap, at most TAIL_BYTES) keeps what a tool says last — a sub-agent's own
    note that its answer was cut, a summary line."""
    if len(text) <= max_bytes // 4:  # fits whatever its characters are
        return text
    size = utf8_size(text)
    if size <= max_bytes:
        return text
    data = text.encode("utf-8", "surrogatepass")
    budget = max(max_bytes, 0)
    tail_budget = min(TAIL_BYTES, budget // 8)
    # "ignore": the half character at each cut
    head = data[: budget - tail_budget].decode("utf-8", "ignore")
    tail = data[size - tail_budget:].decode("utf-8", "ignore") if tail_budget else ""
    omitted = size - utf8_size(head) - utf8_size(tail)
    return head + CUT_MARKER.format(omitted=omitted) + tail


def usage_count(value) -> int:
    """A usage figure as a count a column holds: an int (not a bool) clamped to 0..2**31-1;
    anything else (a float, a string, a list, null) is 0."""
    if isinstance(value, bool) or not isinstance(value, int):
        return 0
    return min(max(value, 0), USAGE_MAX)


def cap(name: str) -> int:
    """A cap setting, at least 1 (0 or a negative would refuse everything)."""
    return max(int(getattr(settings, name)), 1)
