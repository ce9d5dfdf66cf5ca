"""`manage.py knowledge_eval CASES.yaml --collection SLUG [--k 5] [--junit FILE] [--min-recall R] [--no-rerank]`:
recall@k and MRR of a collection's search over questions whose answer is known
(knowledge_app/evaluation.py, docs/knowledge.md#measuring-search)."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from knowledge_app.evaluation import CasesInvalid, cases_read, collection_evaluate, junit_xml
from knowledge_app.models import KnowledgeCollection
from knowledge_app.rerank import rerank_config


class Command(BaseCommand):
    help = "用已知答案的问题衡量知识库检索：recall@k 和 MRR，可写 JUnit。"

    def add_arguments(self, parser):
        parser.add_argument("cases", type=Path)
        parser.add_argument("--collection", required=True)
        parser.add_argument("--k", type=int, default=5)
        parser.add_argument("--junit", type=Path, help="write a JUnit XML report here")
        parser.add_argument("--min-recall", type=float, help="fail when recall@k is below this")
        parser.add_argument("--no-rerank", action="store_true",
                            help="the indexes' fused order, without the configured reranker (to compare)")

    def handle(self, *args, cases: Path, collection: str, k: int, junit: Path | None, min_recall: float | None,
               no_rerank: bool = False, **options):
        target = KnowledgeCollection.objects.filter(slug=collection).first()
        if target is None:
            raise CommandError(f"no collection {collection!r}")
        try:
            read = cases_read(cases.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, CasesInvalid) as exc:
            raise CommandError(f"{cases}: {exc}") from exc
        evaluation = collection_evaluate(collection=target, cases=read, k=max(k, 1), reranked=not no_rerank)
        for result in evaluation.results:
            if result.rank is None:
                self.stdout.write(f"  missed: {result.case.question} → {result.case.document} "
                                  f"{result.case.page or ''} {result.case.heading or ''}".rstrip()
                                  + f"; found: {' | '.join(result.top) or 'nothing'}")
        reranker = rerank_config()
        order = f"reranked by {reranker.model}" if reranker and not no_rerank else "fused order, no reranker"
        self.stdout.write(f"{len(read)} cases ({order}): recall@{evaluation.k} {evaluation.recall():.3f}, "
                          f"MRR {evaluation.mrr():.3f}; with the article: recall@{evaluation.k} "
                          f"{evaluation.recall(strict=True):.3f}, MRR {evaluation.mrr(strict=True):.3f}")
        if junit is not None:
            junit.write_bytes(junit_xml(evaluation, suite=f"knowledge_eval.{collection}"))
        if min_recall is not None and evaluation.recall() < min_recall:
            raise CommandError(f"recall@{evaluation.k} {evaluation.recall():.3f} is below {min_recall}")
