"""Listed words found in a text in one pass, whatever evasions hide them (docs/design.md#content-safety-and-labels).

pyahocorasick: an Aho-Corasick automaton in C, maintained, wheels for every platform; one pass over
the text whatever the number of words (tens of thousands), where a regular expression alternation
or a loop over the words grows with the list.

Both the words and the text are normalised the same way before matching: NFKC (full-width letters
and digits become half-width ones), casefold, and the characters used to break a word up removed
(spaces, punctuation, invisible format characters): "Ｆ.ｏ ｏ" is "foo". Each character of the
normalised text remembers the character of the original it came from, so a hit is a span of the
original text and `mask` masks the right characters there.
"""

import functools
import unicodedata
from dataclasses import dataclass

import ahocorasick

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
        # words: raw word → its entry; a word listed as block and mask blocks (the caller orders them).
        self._automaton = ahocorasick.Automaton()
        # The longest word as matched: a text arriving in pieces holds back what could still
        # become the start of a word (safety_app.screen).
        self.longest = 0
        for word, entry in words.items():
            key = word_key(word)
            if key:
                self._automaton.add_word(key, (len(key), entry))
                self.longest = max(self.longest, len(key))
        self.size = len(self._automaton)
        if self.size:
            self._automaton.make_automaton()

    def hits(self, text: str) -> list[Hit]:
        if not self.size or not text:
            return []
        return self.hits_normalised(*normalised(text))

    def hits_normalised(self, flat: str, origin: list[int]) -> list[Hit]:
        """The hits of a text already normalised (`normalised(text)`), in its original positions."""
        if not self.size or not flat:
            return []
        return [
            Hit(start=origin[end - length + 1], end=origin[end] + 1, category=entry.category, action=entry.action)
            for end, (length, entry) in self._automaton.iter(flat)
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
