"""A text that arrives in pieces (a streamed answer, its reasoning, a tool's live text) checked
against one stage's word lists before any of it is shown (docs/design.md#content-safety-and-labels).

The screen holds back the end of what it has received that could still become the start of a
listed word: the last `longest - 1` characters as matched (spaces and punctuation, which the
matcher ignores, do not count, so a word broken up by any number of them is still caught), and
never half of a word it has found. Everything before that is released: no word can begin there
and end later, so what a `feed` releases is final. A word split over any number of pieces is
therefore found before any of its characters is shown.

Each `feed` scans what is held plus the new piece, so its cost is bounded by the longest word and
the piece, not by the text so far. A word list with no word for the stage makes the screen a
pass-through.
"""

from dataclasses import dataclass, field

from safety_app.matcher import Hit, Matcher, first_block, masked, normalised

# How much text may be held at most: the longest word eight times over (a word written with
# spaces or punctuation between its characters), and never less than this many characters.
HELD_MAX_PER_WORD_CHAR = 8
HELD_MAX_MIN = 256


@dataclass(frozen=True)
class Screened:
    shown: str  # what may be shown now (masked), possibly empty
    masked: tuple[Hit, ...] = ()  # the mask hits inside `shown`
    blocked: Hit | None = None  # a block word: nothing more is shown; `held` has what was not


@dataclass
class StreamScreen:
    matcher: Matcher
    held: str = ""  # received, not yet released
    blocked: Hit | None = None
    _hold: int = field(init=False)
    _held_max: int = field(init=False)

    def __post_init__(self) -> None:
        self._hold = max(self.matcher.longest - 1, 0)
        self._held_max = max(HELD_MAX_PER_WORD_CHAR * self.matcher.longest, HELD_MAX_MIN)

    @property
    def active(self) -> bool:
        return self.matcher.size > 0

    def feed(self, piece: str) -> Screened:
        if self.blocked is not None:
            return Screened(shown="", blocked=self.blocked)
        if not self.active:
            return Screened(shown=piece)
        return self._scan(self.held + piece, final=False)

    def end(self) -> Screened:
        """What is still held, released: no word can grow any more."""
        if self.blocked is not None or not self.held:
            return Screened(shown="", blocked=self.blocked)
        return self._scan(self.held, final=True)

    def _scan(self, text: str, *, final: bool) -> Screened:
        flat, origin = normalised(text)
        hits = self.matcher.hits_normalised(flat, origin)
        if block := first_block(hits):
            self.blocked, self.held = block, text
            return Screened(shown="", blocked=block)
        cut = len(text) if final else self._release_end(text, flat, origin, hits)
        released = [hit for hit in hits if hit.end <= cut]
        self.held = text[cut:]
        return Screened(shown=masked(text[:cut], released), masked=tuple(h for h in released if h.action == "mask"))

    def _release_end(self, text: str, flat: str, origin: list[int], hits: list[Hit]) -> int:
        if len(flat) <= self._hold:
            cut = 0
        else:  # the first character (as matched) a word not yet complete could start at
            cut = origin[len(flat) - self._hold] if self._hold else len(text)
        # Never release half of a found word: it is masked whole, on a later feed.
        while any(hit.start < cut < hit.end for hit in hits):
            cut = min(hit.start for hit in hits if hit.start < cut < hit.end)
        if len(text) - cut > self._held_max:
            # Only separators could make the held text this long (a word's start, then spaces or
            # punctuation without end): release it, or every piece would rescan all of it. A word
            # broken up by more separators than this is not caught in a stream (docs/safety.md).
            cut = len(text) - self._held_max
            while any(hit.start < cut < hit.end for hit in hits):
                cut = max(hit.end for hit in hits if hit.start < cut < hit.end)
        return cut
