"""Listed words found in a text in one pass, whatever evasions hide them (docs/design.md#content-safety-and-labels).

ahocorasick-rs: Python bindings of the Rust `aho-corasick` crate (the one ripgrep uses), maintained,
wheels for every platform; one pass over the text whatever the number of words (tens of
thousands), where a regular expression alternation or a loop over the words grows with the list.
It replaced pyahocorasick, whose trie looks a character up among a node's children one by one: with
100,000 words the root has some 20,000 children, and checking a 12-character chunk of an answer
took 60 µs (1 µs here), the build 2 s (0.3 s here): bench/moderation.py.

Both the words and the text are normalised the same way before matching: NFKC (full-width letters
and digits become half-width ones), casefold, and the characters used to break a word up removed
(spaces, punctuation, invisible format characters): "Ｆ.ｏ ｏ" is "foo". Each character of the
normalised text remembers the character of the original it came from, so a hit is a span of the
original text and `mask` masks the right characters there.
"""

import functools
import unicodedata
from dataclasses import dataclass

import ahocorasick_rs

MASK_CHAR = "*"
_SEPARATORS = ("Z", "P", "C")  # Unicode category initials: separators, punctuation, control/format


@dataclass(frozen=True)
class Entry:
    category: str
    action: str  # "block" | "mask"


@dataclass(frozen=True)
class Hit:
    start: int  # in the original text, end excluded
    end: int
    category: str
    action: str


@functools.lru_cache(maxsize=65536)
def _folded(char: str) -> str:
    """One character as matched: NFKC, casefolded, and nothing when it is a separator."""
    return "".join(
        p for p in unicodedata.normalize("NFKC", char).casefold() if unicodedata.category(p)[0] not in _SEPARATORS
    )


def word_key(word: str) -> str:
    """A listed word as matched (empty: only separators, it can match nothing)."""
    return "".join(map(_folded, word))


def normalised(text: str) -> tuple[str, list[int]]:
    """The text as matched, and for each of its characters the index of the original one."""
    chars: list[str] = []
    origin: list[int] = []
    for index, char in enumerate(text):
        if folded := _folded(char):
            chars.append(folded)
            origin.extend([index] * len(folded))
    return "".join(chars), origin


class Matcher:
    """The automaton of one stage's words. Built once per change of the lists (safety_app.lists_cache)."""

    def __init__(self, words: dict[str, Entry]):
        # words: raw word → its entry. Two words alike once normalised ("法轮", "法 轮") are one
        # key; if one of them blocks, the key blocks.
        entries: dict[str, Entry] = {}
        for word, entry in words.items():
            key = word_key(word)
            if key and (key not in entries or entry.action == "block"):
                entries[key] = entry
        self._entries = list(entries.values())  # by pattern index
        self.size = len(entries)
        # The longest word as matched: a text arriving in pieces holds back what could still
        # become the start of a word (safety_app.screen).
        self.longest = max(map(len, entries), default=0)
        self._automaton = (
            ahocorasick_rs.AhoCorasick(list(entries), matchkind=ahocorasick_rs.MatchKind.Standard)
            if entries else None
        )

    def hits(self, text: str) -> list[Hit]:
        if not self.size or not text:
            return []
        return self.hits_normalised(*normalised(text))

    def hits_normalised(self, flat: str, origin: list[int]) -> list[Hit]:
        """The hits of a text already normalised (`normalised(text)`), in its original positions:
        every occurrence of every word, overlapping ones too, in the order they end."""
        if not self.size or not flat:
            return []
        found = self._automaton.find_matches_as_indexes(flat, overlapping=True)
        return [
            Hit(start=origin[start], end=origin[end - 1] + 1, category=self._entries[index].category,
                action=self._entries[index].action)
            for index, start, end in found
        ]


def first_block(hits: list[Hit]) -> Hit | None:
    return next((hit for hit in hits if hit.action == "block"), None)


def masked(text: str, hits: list[Hit]) -> str:
    """The text with every character of each `mask` hit's span (the separators inserted in it too) replaced."""
    spans = [(hit.start, hit.end) for hit in hits if hit.action == "mask"]
    if not spans:
        return text
    chars = list(text)
    for start, end in spans:
        chars[start:end] = MASK_CHAR * (end - start)
    return "".join(chars)
