"""How well a collection's search finds the answers to questions whose answer is known
(docs/knowledge.md#measuring-search): `manage.py knowledge_eval CASES.yaml --collection SLUG`.

A case is a question and where its answer is: the document (its title), and optionally the page,
the heading (found anywhere in a passage's heading path) and the article (第X条, in the heading
path or at the passage's start). A case is found at rank r when the r-th passage search returns
is in that place; recall@k counts the cases found within k, MRR averages 1/r (0 when not found).
Two levels are measured: the place without the article, and with it (strict).
"""

from dataclasses import dataclass
from xml.etree import ElementTree

import yaml

from knowledge_app.models import KnowledgeCollection
from knowledge_app.search import collection_search

CASES_MAX = 10_000


class CasesInvalid(ValueError):
    pass


@dataclass(frozen=True)
class Case:
    question: str
    document: str
    page: int | None = None
    heading: str | None = None
    article: str | None = None


@dataclass(frozen=True)
class CaseResult:
    case: Case
    rank: int | None  # the place, article aside; None: not within k
    strict_rank: int | None  # with the article
    top: tuple[str, ...]  # where the first passages were, for the report


@dataclass(frozen=True)
class Evaluation:
    k: int
    results: tuple[CaseResult, ...]

    def recall(self, *, strict: bool = False) -> float:
        ranks = [r.strict_rank if strict else r.rank for r in self.results]
        return sum(rank is not None for rank in ranks) / len(ranks) if ranks else 0.0

    def mrr(self, *, strict: bool = False) -> float:
        ranks = [r.strict_rank if strict else r.rank for r in self.results]
        return sum(1 / rank for rank in ranks if rank) / len(ranks) if ranks else 0.0


def cases_read(text: str) -> list[Case]:
    data = yaml.safe_load(text)
    rows = data.get("cases") if isinstance(data, dict) else None
    if not isinstance(rows, list) or not rows:
        raise CasesInvalid("the file needs `cases:`, a list of {question, document, page?, heading?, article?}")
    if len(rows) > CASES_MAX:
        raise CasesInvalid(f"at most {CASES_MAX} cases")
    cases = []
    for number, row in enumerate(rows, start=1):
        if not isinstance(row, dict) or not isinstance(row.get("question"), str) or not isinstance(row.get("document"), str):
            raise CasesInvalid(f"case {number}: question and document (strings) are required")
        page = row.get("page")
        if page is not None and (isinstance(page, bool) or not isinstance(page, int)):
            raise CasesInvalid(f"case {number}: page must be a number")
        cases.append(Case(question=row["question"], document=row["document"], page=page,
                          heading=str(row["heading"]) if row.get("heading") else None,
                          article=str(row["article"]) if row.get("article") else None))
    return cases


def _in_place(hit, case: Case, *, strict: bool) -> bool:
    passage = hit.passage
    if passage.document.title != case.document:
        return False
    if case.page is not None and passage.page != case.page:
        return False
    if case.heading and case.heading not in passage.heading:
        return False
    if strict and case.article and case.article not in passage.heading and not passage.text.startswith(case.article):
        return False
    return True


def collection_evaluate(*, collection: KnowledgeCollection, cases: list[Case], k: int = 5,
                        reranked: bool = True) -> Evaluation:
    """Each case asked of the collection's search as the model would ask it (with the reranker when
    one is configured; `reranked=False`: the indexes' fused order, to compare)."""
    results = []
    for case in cases:
        hits = collection_search(collection, case.question, limit=k, reranked=reranked)
        rank = next((n for n, hit in enumerate(hits, start=1) if _in_place(hit, case, strict=False)), None)
        strict = next((n for n, hit in enumerate(hits, start=1) if _in_place(hit, case, strict=True)), None)
        top = tuple(f"{hit.passage.document.title} p.{hit.passage.page} {hit.passage.heading}".strip()
                    for hit in hits[:3])
        results.append(CaseResult(case=case, rank=rank, strict_rank=strict, top=top))
    return Evaluation(k=k, results=tuple(results))


def junit_xml(evaluation: Evaluation, *, suite: str) -> bytes:
    """One testcase per question: failed when its answer is not within k (CI reads it)."""
    failed = [r for r in evaluation.results if r.rank is None]
    root = ElementTree.Element("testsuite", name=suite, tests=str(len(evaluation.results)), failures=str(len(failed)))
    for result in evaluation.results:
        case = ElementTree.SubElement(root, "testcase", classname=suite, name=result.case.question)
        if result.rank is None:
            failure = ElementTree.SubElement(case, "failure", message=f"not in the top {evaluation.k}")
            failure.text = "expected: " + " ".join(
                str(part) for part in (result.case.document, result.case.page, result.case.heading) if part
            ) + "\nfound: " + " | ".join(result.top)
    return ElementTree.tostring(root, encoding="utf-8", xml_declaration=True)
