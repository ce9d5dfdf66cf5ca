"""`manage.py knowledge_eval` over the demo handbook and its cases (knowledge_app/evaluation.py):
recall@5 and MRR printed, a JUnit report written, a threshold enforced, a broken file refused."""

from io import StringIO
from xml.etree import ElementTree

import pytest
from django.core.management import CommandError, call_command

from demo_app.handbook import HANDBOOK_SLUG, demo_handbook_load
from demo_app.knowledge import EVAL_CASES, EVAL_CASES_2, EVAL_CASES_3
from knowledge_app.evaluation import Case, collection_evaluate
from knowledge_app.models import KnowledgeCollection

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def handbook(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path
    demo_handbook_load(agent_slug="none")
    return KnowledgeCollection.objects.get(slug=HANDBOOK_SLUG)


@pytest.mark.parametrize("cases", [EVAL_CASES, EVAL_CASES_2, EVAL_CASES_3], ids=lambda path: path.name)
def test_the_demo_cases_are_measured_and_reported(handbook, tmp_path, capsys, cases):
    junit = tmp_path / "eval.xml"
    call_command("knowledge_eval", str(cases), "--collection", HANDBOOK_SLUG, "--junit", str(junit))
    out = capsys.readouterr().out
    summary = out.strip().splitlines()[-1]
    with capsys.disabled():  # the figure, as CI's log shows it (docs/benchmarks.md)
        print(f"\nknowledge_eval demo handbook, {cases.name}: {summary}")  # noqa: T201
    recall = float(summary.split("recall@5 ")[1].split(",")[0])
    suite = ElementTree.parse(junit).getroot()
    assert int(suite.get("tests")) >= 40
    assert int(suite.get("failures")) == round((1 - recall) * int(suite.get("tests")))
    assert out.count("  missed: ") == int(suite.get("failures"))


def test_a_case_is_found_at_its_rank_and_the_article_is_the_strict_level(handbook):
    found = collection_evaluate(collection=handbook, cases=[
        Case(question="转专业需要满足什么条件？", document="转专业管理规定（示例）", page=2, heading="第二章",
             article="第四条"),
        Case(question="转专业需要满足什么条件？", document="不存在的文件"),
    ])
    first, missing = found.results
    assert first.rank == 1 and first.strict_rank == 1 and missing.rank is None
    assert found.recall() == 0.5 and found.mrr() == 0.5


def test_a_threshold_fails_the_command_and_a_broken_file_is_refused(handbook, tmp_path):
    with pytest.raises(CommandError, match="below"):
        call_command("knowledge_eval", str(EVAL_CASES), "--collection", HANDBOOK_SLUG, "--min-recall", "1.01",
                     stdout=StringIO())
    broken = tmp_path / "cases.yaml"
    broken.write_text("cases:\n  - question: 1\n", encoding="utf-8")
    with pytest.raises(CommandError, match="question and document"):
        call_command("knowledge_eval", str(broken), "--collection", HANDBOOK_SLUG, stdout=StringIO())
    with pytest.raises(CommandError, match="no collection"):
        call_command("knowledge_eval", str(EVAL_CASES), "--collection", "nope", stdout=StringIO())


def test_staff_try_a_query_and_see_the_ranked_passages_their_scores_and_index(admin_client, handbook):
    from django.urls import reverse

    url = reverse("admin:knowledge_app_search", args=[handbook.pk])
    page = admin_client.get(url, {"q": "转专业需要满足什么条件"}).content.decode()
    rows = page.split("<tbody>")[1].split("</tbody>")[0].split("<tr>")[1:]
    assert len(rows) >= 3 and "转专业管理规定（示例）" in rows[0] and "keyword（1）" in rows[0]
    assert "<script>" not in admin_client.get(url, {"q": "<script>alert(1)</script>"}).content.decode().split("<form")[1]
    listing = admin_client.get(reverse("admin:knowledge_app_knowledgecollection_changelist")).content.decode()
    assert url in listing
