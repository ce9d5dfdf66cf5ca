"""The keyword index of a collection: Chinese segmentation (jieba's dictionary and algorithm, in
Rust: rjieba) and BM25 (bm25s), kept by each worker while the database says it is current
(docs/knowledge.md#keyword-search).

What is indexed: the passages of the collection's *ready* documents, each as its document's title,
its heading path and its text, so that a question naming 「转专业」 finds the passages under the
heading 转专业 even where their text never says it. A document being indexed again, or failed, is
not searched; its passages are replaced in one transaction (by the indexing job), and the index
is read in one statement, so a search sees a document whole, before or after, never half of it.

When it is read again: every search reads the knowledge stamp (knowledge_app.index_stamp), one
row whose token database triggers change at every write to the documents or passages. While the
token is the one the worker's index was checked with, the index serves as it is. When it changed,
the collection's content is summed up in two queries (its ready documents' ids and titles;
their passages' count, ids and characters); only if that differs — a write to another
collection, or an indexing job's progress, does not change it — is the index built again,
once, while that collection's other searches wait for it.

The dictionary (≈ 0.1 s, some MB) is loaded at a worker's first search, never when Django starts.
"""

import ctypes
import functools
import re
import threading
from array import array
from dataclasses import dataclass

import numpy as np
from django.db import connection
from django.db.models import Count, Max, Sum
from django.db.models.functions import Length

from campus_agent.base.stamps import TRIGGER_VENDORS
from knowledge_app.index_stamp import stamp_token
from knowledge_app.models import KnowledgeCollection, KnowledgeDocument, KnowledgePassage

# BM25's usual constants (Robertson; bm25s's defaults), named so a test or a benchmark can see them.
BM25_K1 = 1.5
BM25_B = 0.75

# Words that say nothing about which passage answers: particles, pronouns, the words questions are
# made of (「什么」「怎么」「如何」), and English's commonest. Kept short on purpose: BM25's idf
# already weighs common words down, and a longer list drops words some question needs.
STOP_WORDS = frozenset(
    """
    的 地 得 了 着 过 是 在 和 与 及 或 而 且 并 等 之 其 也 都 就 又 还 被 把 对 向 从 由 以 于 为 将 给
    我 你 您 他 她 它 我们 你们 他们 她们 它们 咱们 自己 这 那 这个 那个 这些 那些 这样 那样 这里 那里
    哪 哪个 哪些 哪里 什么 怎么 怎样 怎么样 如何 为什么 多少 几 吗 呢 吧 啊 呀 哦 嘛 么 请问 一下
    个 些 有 没 没有 不 要 会 能 可 可以 应 应当 应该 该 所 所有 每 各 即 则 但 但是 如果 因为 所以 以及
    a an the of to in on at for by and or is are be was were it this that with as from
    """.split()
)
# What a term is made of: CJK ideographs, ASCII letters and digits (a number keeps its point:
# 「3.0」). Anything else — punctuation, spaces, symbols — is dropped.
_TERM_CHARS = r"0-9a-z\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_TERM = re.compile(f"[{_TERM_CHARS}]+")
_NOT_TERM = re.compile(f"[^{_TERM_CHARS}]+")
_NUMBER = re.compile(r"\d+\.\d+")
# Full-width forms (ＧＰＡ３．０, as Chinese documents often type them) made ASCII: the half of
# NFKC that matters here, at a quarter of its cost (NFKC of every passage was 15 % of a build).
_FULL_WIDTH = re.compile("[\uff01-\uff5e]+")
_FULL_WIDTH_TO_ASCII = {code: code - 0xFEE0 for code in range(0xFF01, 0xFF5F)}


def _half_width(text: str) -> str:
    return _FULL_WIDTH.sub(lambda found: found.group().translate(_FULL_WIDTH_TO_ASCII), text)


@functools.cache
def _segmenter():
    # Imported here, not at the top: rjieba builds its dictionary when imported, and Django
    # imports this module at start-up (the admin, the tool) where nothing is searched yet.
    import rjieba

    return rjieba.cut_for_search


def terms(text: str) -> list[str]:
    """The index terms of a text, in order: jieba's search-mode segmentation (a long word and the
    shorter words inside it: 「奖学金」 gives 奖学 and 奖学金), full-width forms made ASCII (ＧＰＡ,
    ３．０), ASCII lower-cased, punctuation, spaces and stop words removed."""
    cut = _segmenter()
    out = []
    for word in cut(_half_width(text).lower(), True):
        if not _TERM.fullmatch(word) and not _NUMBER.fullmatch(word):
            word = _NOT_TERM.sub("", word)  # 「gpa:」, and the spaces and punctuation themselves
        if word and word not in STOP_WORDS:
            out.append(word)
    return out


@dataclass(frozen=True)
class Fingerprint:
    """What the collection's searchable content is: its ready documents (a few hundred rows) and
    their passages summed up in one aggregate."""

    documents: tuple  # (id, title) of each ready document: a title is indexed with each passage
    passages: int
    passage_ids: int
    last_passage: int
    characters: int


def _fingerprint(collection_id: int) -> Fingerprint:
    ready = KnowledgeDocument.objects.filter(collection_id=collection_id, status=KnowledgeDocument.Status.READY)
    passages = KnowledgePassage.objects.filter(document__in=ready).aggregate(
        n=Count("id"), ids=Sum("id"), last=Max("id"), chars=Sum(Length("text") + Length("heading"))
    )
    return Fingerprint(
        documents=tuple(ready.order_by("id").values_list("id", "title")),
        passages=passages["n"], passage_ids=passages["ids"] or 0, last_passage=passages["last"] or 0,
        characters=passages["chars"] or 0,
    )


class TermColumns:
    """The index's vocabulary, term → its column in BM25's matrix, for the few terms of a question:
    the terms' UTF-8 sorted in one bytes string, found by bisection (≈ 20 steps). A dict of
    436,000 terms took ≈ 60 MB of a worker, this ≈ 8 (bench/knowledge_search.py)."""

    def __init__(self, vocab: dict[str, int]):
        items = sorted((term.encode(), column) for term, column in vocab.items())
        self._blob = b"".join(term for term, _ in items)
        self._ends = np.cumsum([len(term) for term, _ in items], dtype=np.int64)
        self._columns = np.asarray([column for _, column in items], dtype=np.int32)

    def __len__(self) -> int:
        return len(self._columns)

    def _term(self, i: int) -> bytes:
        return self._blob[self._ends[i - 1] if i else 0:self._ends[i]]

    def get(self, term: str) -> int | None:
        key, low, high = term.encode(), 0, len(self._columns)
        while low < high:
            middle = (low + high) // 2
            if self._term(middle) < key:
                low = middle + 1
            else:
                high = middle
        if low < len(self._columns) and self._term(low) == key:
            return int(self._columns[low])
        return None


def _freed_memory_give_back() -> None:
    # A build frees about twice what it keeps (the passages' text and terms, bm25s's working
    # arrays), in blocks glibc's malloc keeps for the process: 100,000 passages left the worker
    # 400 MB larger than the index itself (bench/knowledge_search.py). Give them back to the system.
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to do
        pass


class KeywordIndex:
    """The BM25 index of one collection's searchable passages, as read at one moment. Read-only
    once built: the searches of a worker's threads share it."""

    def __init__(self, rows, *, fingerprint: Fingerprint | None = None, token: str | None = None):
        """`rows`: (passage id, document title, heading, text) of every passage to index."""
        import bm25s  # numpy's and bm25s's import, only in a worker that searches

        self.fingerprint = fingerprint
        self.token = token
        vocab: dict[str, int] = {}
        ids: list[int] = []
        corpus: list[array] = []  # each passage's term ids: 4 bytes a term where a list takes 8
        titles: dict[str, list[str]] = {}  # a document's title is cut once, not once per passage
        for passage_id, title, heading, text in rows:
            title_terms = titles.get(title)
            if title_terms is None:
                title_terms = titles[title] = terms(title)
            words = title_terms + terms(heading) + terms(text)
            corpus.append(array("i", [vocab.setdefault(word, len(vocab)) for word in words]))
            ids.append(passage_id)
        self.passage_ids = np.asarray(ids, dtype=np.int64)
        self._bm25 = None
        if ids and vocab:
            # numpy's CSC, no scipy; no progress bars in a worker's log.
            self._bm25 = bm25s.BM25(k1=BM25_K1, b=BM25_B, csc_backend="numpy")
            self._bm25.index((corpus, vocab), show_progress=False)
            # bm25s keeps the vocabulary as a dict and a set of its ids, which only its retrieve()
            # and save() read (we score by ids): ≈ 90 MB at 100,000 passages, where TermColumns
            # holds the same in ≈ 8.
            self._bm25.vocab_dict = self._bm25.unique_token_ids_set = None
        self.vocab = TermColumns(vocab)
        del corpus, titles, vocab
        _freed_memory_give_back()

    def __len__(self) -> int:
        return len(self.passage_ids)

    def search(self, query: str, k: int = 5) -> list[tuple[int, float]]:
        """The k best passages for `query`, best first, as (passage id, BM25 score); only
        passages that share at least one term with the query."""
        if self._bm25 is None or k <= 0:
            return []
        # Each query term once: search mode repeats words (「转专业」「专业」) and a term the
        # question says twice is not twice as important.
        ids = list(dict.fromkeys(column for word in terms(query) if (column := self.vocab.get(word)) is not None))
        if not ids:
            return []
        scores = self._bm25.get_scores_from_ids(ids)
        matched = np.flatnonzero(scores > 0)
        if len(matched) > k:
            matched = matched[np.argpartition(scores[matched], -k)[-k:]]
        # Best first; equal scores by passage id, so a ranking is the same on every worker.
        order = sorted(matched.tolist(), key=lambda i: (-float(scores[i]), int(self.passage_ids[i])))
        return [(int(self.passage_ids[i]), float(scores[i])) for i in order]


def collection_rows(collection_id: int):
    """The rows a collection's index is built from, in one statement (one snapshot): the passages
    of its ready documents."""
    return (
        KnowledgePassage.objects.filter(
            document__collection_id=collection_id, document__status=KnowledgeDocument.Status.READY
        )
        .order_by("id")
        .values_list("id", "document__title", "heading", "text")
        .iterator(chunk_size=2000)
    )


_kept: dict[int, KeywordIndex] = {}
_locks: dict[int, threading.Lock] = {}
_locks_lock = threading.Lock()


def keyword_index(collection: KnowledgeCollection | int) -> KeywordIndex:
    """The collection's keyword index as it is now (sync): one query (the stamp) while this worker's
    copy is current; one aggregate more when something in the knowledge base changed; the index
    built again when this collection's content did."""
    collection_id = collection if isinstance(collection, int) else collection.pk
    token = stamp_token() if connection.vendor in TRIGGER_VENDORS else None
    kept = _kept.get(collection_id)
    if kept is not None and token is not None and kept.token == token:
        return kept
    with _locks_lock:
        lock = _locks.setdefault(collection_id, threading.Lock())
    with lock:  # the searches of a burst after a change check, and build, once
        kept = _kept.get(collection_id)
        if kept is not None and token is not None and kept.token == token:
            return kept
        fingerprint = _fingerprint(collection_id)
        if kept is not None and kept.fingerprint == fingerprint:
            kept.token = token  # what changed is not this collection's content
            return kept
        built = KeywordIndex(collection_rows(collection_id), fingerprint=fingerprint, token=token)
        _kept[collection_id] = built
        return built


def keyword_search(collection: KnowledgeCollection | int, query: str, k: int = 5) -> list[tuple[int, float]]:
    """The k passages of the collection that best match `query` by keywords: [(passage id, BM25
    score)], best first."""
    return keyword_index(collection).search(query, k)


def keyword_indexes_forget() -> None:
    """Drops this worker's indexes (tests; a worker that wants the memory back)."""
    with _locks_lock:
        _kept.clear()
