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

# What students say beside what rules say (knowledge_app.synonyms): a campus's everyday words,
# staff edit them in admin (知识库 → 同义词).
HANDBOOK_SYNONYMS = """宿舍 寝室 宿舍楼 公寓
关门 锁门 门禁
外宿 夜不归宿 不回宿舍 走读 外住
违规电器 大功率电器 电热毯 热得快
不及格 挂科 挂了 没过
补考 重考 重修
绩点 gpa 学分绩点
转专业 换专业 转系
旷课 逃课 翘课
请假 告假 请个假
处分 处罚 记过 警告
申诉 投诉 复议
辅导员 导员
休学 停学
奖学金 奖金
发放 到账 发钱 打款
逾期 超期 过期 晚还
借阅 借书
续借 续期
座位 占座 位子
图书馆 图书室"""


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
