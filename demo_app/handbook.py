"""The demo's knowledge base (docs/demo.md): the synthetic handbook of 示例大学 (demo_app/knowledge)
as a collection the demo agent searches, so that with no model configured a new user's
「转专业需要满足什么条件？」 is answered from it by keyword routing, with its source.

Loaded by `manage.py load_demo_handbook` (scripts/run.sh runs it after load_demo): its documents
are read and indexed at once, which takes a few seconds the first time; run again, it finds them
there and changes nothing."""

from dataclasses import dataclass, field

from agents_app.models import Agent
from demo_app.knowledge import DEMO_DOCUMENTS
from knowledge_app.indexing import documents_index_waiting
from knowledge_app.ingest import document_add
from knowledge_app.models import KnowledgeCollection

HANDBOOK_SLUG = "student-handbook"
HANDBOOK_NAME = "学生手册（示例）"
HANDBOOK_DESCRIPTION = (
    "示例大学的规章制度原文：学生手册（学籍、考勤与请假、考试与成绩、奖惩、申诉）、转专业管理规定、"
    "奖学金评定办法、宿舍管理规定、图书馆借阅规则。学生问规定、条件、流程、时间、处分、请假、转专业、"
    "奖学金、宿舍、借书时检索这里。"
)

# The school's own words beside what its rules say (knowledge_app.synonyms; staff edit them in
# admin, 知识库 → 同义词). What students say on any campus (挂科, 寝室, 国奖) is the campus list's,
# read with these.
HANDBOOK_SYNONYMS = """宿舍 公寓 学生公寓
示例大学 本校 我校"""


@dataclass
class HandbookReport:
    added: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    indexed: int = 0
    collection_created: bool = False


def demo_handbook_load(*, agent_slug: str) -> HandbookReport:
    """The handbook's collection (made when missing, linked to the agent then), its documents
    added and indexed (those already there are kept)."""
    report = HandbookReport()
    collection, report.collection_created = KnowledgeCollection.objects.get_or_create(
        slug=HANDBOOK_SLUG, defaults={"name": HANDBOOK_NAME, "description": HANDBOOK_DESCRIPTION,
                                      "synonyms": HANDBOOK_SYNONYMS})
    if report.collection_created:  # linked only on creation: a link staff removed stays removed
        agent = Agent.objects.filter(slug=agent_slug).first()
        if agent is not None:
            agent.knowledge_collections.add(collection)
    for document in DEMO_DOCUMENTS:
        added = document_add(collection=collection, name=document.file, data=document.path.read_bytes())
        (report.added if added.created else report.kept).append(added.document.title)
    report.indexed = documents_index_waiting()
    return report
