"""A collection's synonyms (docs/knowledge.md#synonyms): staff write what students say beside what
the documents say — 「宿舍 寝室 宿舍楼」, 「不及格 挂科 挂了」 — one group a line. A question that
says one of a group's words is searched with the others too (by the keyword index; the vectors
read the question as asked), so 「寝室几点关门」 finds the article about 宿舍.

Matched on the question's text as written (not on its segmented terms): a Chinese word the
segmenter cuts differently (挂了 → 挂, 了) is still found. Words are compared case-insensitively.

Beside a collection's own groups, the campus list (data/campus_synonyms.txt: what students
commonly say on any campus — 国奖, 查卷, 挂科, 换寝室) is read too, unless
KNOWLEDGE_CAMPUS_SYNONYMS is off.
"""

import functools
import re
from pathlib import Path

from django.conf import settings

SYNONYMS_MAX_CHARS = 20_000
GROUP_MAX_WORDS = 20
WORD_MAX_CHARS = 30
_SEPARATORS = re.compile(r"[\s,，、;；/|]+")


def synonym_groups(text: str) -> list[tuple[str, ...]]:
    """The groups of a collection's synonyms field: a line each, its words (at least two, each at
    most WORD_MAX_CHARS characters, at most GROUP_MAX_WORDS a group) lower-cased, once."""
    groups = []
    for line in (text or "")[:SYNONYMS_MAX_CHARS].splitlines():
        words = tuple(dict.fromkeys(w.casefold() for w in _SEPARATORS.split(line.strip())
                                    if w and len(w) <= WORD_MAX_CHARS))[:GROUP_MAX_WORDS]
        if len(words) >= 2:
            groups.append(words)
    return groups


CAMPUS_SYNONYMS = Path(__file__).resolve().parent / "data" / "campus_synonyms.txt"


@functools.cache
def campus_synonym_groups() -> tuple[tuple[str, ...], ...]:
    """The campus list's groups (its `#` lines are comments), read once per process."""
    text = CAMPUS_SYNONYMS.read_text(encoding="utf-8")
    return tuple(synonym_groups("\n".join(line for line in text.splitlines() if not line.startswith("#"))))


def query_expanded(query: str, synonyms: str) -> str:
    """The question with the other words of every group it says a word of, after it: the
    collection's groups, then the campus list's (when KNOWLEDGE_CAMPUS_SYNONYMS is on)."""
    said = query.casefold()
    groups = synonym_groups(synonyms)
    if settings.KNOWLEDGE_CAMPUS_SYNONYMS:
        groups += campus_synonym_groups()
    added = dict.fromkeys(word for group in groups if any(word in said for word in group)
                          for word in group if word not in said)
    return f"{query} {' '.join(added)}" if added else query
