"""The keyless demo answers from its handbook (issue 45 point 6): `load_demo` then
`load_demo_handbook`, as scripts/run.sh runs them, and 「转专业需要满足什么条件？」 asked with no
model configured gets the article that answers it, with its source, by keyword routing."""

from io import StringIO

import pytest
from django.core.management import call_command

from demo_app.handbook import HANDBOOK_SLUG
from knowledge_app.models import KnowledgeCollection, KnowledgeDocument
from testkit.web.sse import chat

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_keyless_demo_answers_a_rule_from_the_handbook_with_its_source(
    live_asgi, settings, tmp_path, auth_headers
):
    settings.LLM_BASE_URL = ""
    settings.MEDIA_ROOT = tmp_path
    settings.DEMO_BASE_URL = f"{live_asgi}/demo/subagents"
    call_command("load_demo", "--no-users", stdout=StringIO())
    out = StringIO()
    call_command("load_demo_handbook", stdout=out)
    assert "新加入 5 个文件" in out.getvalue() and "本次索引 5 个" in out.getvalue()
    assert KnowledgeDocument.objects.filter(status=KnowledgeDocument.Status.READY).count() == 5

    result = chat(live_asgi, {"message": "转专业需要满足什么条件？"}, headers=auth_headers, timeout=30)

    assert [call["tool"] for call in result.of("tool_call")] == ["search_student_handbook"]
    assert "[1] 《转专业管理规定（示例）》 p.2" in result.text and "第四条" in result.text
    assert "转给“学生手册（示例）”回答" in result.text  # the notice names the collection
    assert "不要执行" not in result.text  # the model's instructions are not the student's
    assert result.of("tool_result")[0]["sources"][0]["page"] == 2
    assert result.frames[-1]["sources"][0]["page"] == 2  # the page's footnotes, as for a model's answer

    again = StringIO()
    call_command("load_demo_handbook", stdout=again)  # run again: nothing changes
    assert "新加入 0 个文件" in again.getvalue() and KnowledgeCollection.objects.get(slug=HANDBOOK_SLUG)
