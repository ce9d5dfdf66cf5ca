"""Issue 45 point 3, the keyword half: Chinese segmentation and BM25 over a collection's ready
passages (knowledge_app.keyword_index), kept per worker while the knowledge stamp says it is
current, and searched through knowledge_app.search.collection_search."""

import subprocess
import sys
import threading

import pytest
from django.core.management import call_command
from django.db import connection, connections, transaction

from knowledge_app import keyword_index as keyword_module
from knowledge_app.index_stamp import KnowledgeStamp, stamp_tables
from knowledge_app.keyword_index import KeywordIndex, TermColumns, keyword_index, keyword_search, terms
from knowledge_app.models import KnowledgeCollection, KnowledgeDocument, KnowledgePassage
from knowledge_app.search import KEYWORD, collection_search
from testkit.processes import BASE_DIR, project_env

pytestmark = pytest.mark.embedded

READY = KnowledgeDocument.Status.READY

HANDBOOK = {
    "学生手册": [
        ("第三章 学籍管理 › 转专业", "学生在第一学年结束后，平均学分绩点不低于3.0、没有不及格课程的，可以申请转入其他专业。"
                                  "转专业的条件和接收名额由各学院每年公布。"),
        ("第三章 学籍管理 › 休学", "学生因病或其他原因需要休学的，应当提出申请，经学院同意后报教务处批准。休学期限一般为一年。"),
        ("第四章 考勤 › 请假", "学生因事因病不能上课，需要事先请假。请假三天以内由辅导员批准，超过三天需学院批准。"),
        ("第五章 宿舍管理", "宿舍晚上十一点熄灯，学生不得在宿舍使用大功率电器，不得留宿外来人员。"),
    ],
    "奖学金评定办法": [
        ("第一条 评定条件", "申请国家奖学金的学生需要满足以下条件：成绩优秀，综合测评排名前百分之十，没有违纪处分。"),
        ("第二条 名额", "每学年评定一次，名额按学院学生人数分配，评定结果公示五个工作日。"),
    ],
    "图书馆规则": [
        ("借阅", "本科生可借图书十册，借期三十天，可续借一次；逾期每册每天收取滞纳金。"),
    ],
}


@pytest.fixture(autouse=True)
def _fresh_indexes():
    # A worker's kept indexes outlive a test's rolled-back rows: each test starts as a new worker.
    keyword_module.keyword_indexes_forget()
    yield
    keyword_module.keyword_indexes_forget()


def _document(collection, title, passages, *, status=READY):
    document = KnowledgeDocument.objects.create(
        collection=collection, title=title, file=f"{title}.pdf", content_hash=str(hash((collection.pk, title)))[-16:],
        status=status,
    )
    KnowledgePassage.objects.bulk_create(
        KnowledgePassage(document=document, seq=seq, heading=heading, text=text, page=seq + 1)
        for seq, (heading, text) in enumerate(passages)
    )
    return document


@pytest.fixture
def handbook(db):
    collection = KnowledgeCollection.objects.create(slug="handbook", name="学生手册", description="学生手册")
    for title, passages in HANDBOOK.items():
        _document(collection, title, passages)
    return collection


def _texts(hits):
    return [hit.passage.text for hit in hits]


def test_terms_segment_chinese_and_drop_stop_words_punctuation_and_case():
    assert terms("转专业需要什么条件？") == ["转", "专业", "需要", "条件"]
    assert terms("GPA 达到 3.0 的，可以申请Python课程！") == ["gpa", "达到", "3.0", "申请", "python", "课程"]
    assert terms("ＧＰＡ不低于３．０（含）") == terms("gpa不低于3.0(含)") == ["gpa", "低于", "3.0", "含"]
    # Search mode: the long word and the words inside it, so 「奖学金」 matches 「国家奖学金」.
    assert {"奖学", "奖学金", "国家"} <= set(terms("国家奖学金"))


def test_the_passage_about_the_conditions_of_a_change_of_major_ranks_first(handbook):
    hits = collection_search(handbook, "转专业需要什么条件")
    assert hits[0].passage.heading == "第三章 学籍管理 › 转专业"
    assert hits[0].found_by == (KEYWORD,) and hits[0].ranks == {KEYWORD: 1}
    assert [hit.score for hit in hits] == sorted((hit.score for hit in hits), reverse=True)
    assert hits[0].score > hits[1].score
    assert keyword_search(handbook, "转专业需要什么条件", k=1) == [(hits[0].passage.pk, hits[0].score)]
    assert collection_search(handbook, "请假超过三天谁批准")[0].passage.heading == "第四章 考勤 › 请假"
    assert collection_search(handbook, "奖学金名额怎么分配")[0].passage.heading == "第二条 名额"


def test_a_question_naming_a_heading_or_a_title_finds_passages_that_never_say_it(db):
    collection = KnowledgeCollection.objects.create(slug="rules", name="规定", description="规定")
    _document(collection, "学生手册", [("第五章 转专业", "每学年春季学期第二周受理申请，逾期不予办理。"),
                                      ("第六章 毕业", "修满学分并通过毕业论文答辩的学生准予毕业。")])
    _document(collection, "奖学金评定办法", [("第二条", "每学年评定一次，结果公示五个工作日。")])
    assert _texts(collection_search(collection, "转专业")) == ["每学年春季学期第二周受理申请，逾期不予办理。"]
    assert _texts(collection_search(collection, "奖学金")) == ["每学年评定一次，结果公示五个工作日。"]


def test_a_document_not_yet_ready_is_not_found_until_it_is(handbook):
    document = _document(handbook, "宿舍用电规定", [("用电", "宿舍内禁止使用电磁炉和电热毯。")],
                         status=KnowledgeDocument.Status.INDEXING)
    assert collection_search(handbook, "电磁炉") == []
    KnowledgeDocument.objects.filter(pk=document.pk).update(status=KnowledgeDocument.Status.FAILED)
    assert collection_search(handbook, "电磁炉") == []
    KnowledgeDocument.objects.filter(pk=document.pk).update(status=READY)
    assert _texts(collection_search(handbook, "电磁炉")) == ["宿舍内禁止使用电磁炉和电热毯。"]


def test_a_search_finds_only_its_own_collections_passages(handbook):
    other = KnowledgeCollection.objects.create(slug="library", name="图书馆", description="图书馆")
    _document(other, "开放时间", [("开放", "图书馆每天早上八点开放，借阅图书需刷校园卡。")])
    assert _texts(collection_search(other, "借阅图书")) == ["图书馆每天早上八点开放，借阅图书需刷校园卡。"]
    assert [hit.passage.document.collection_id for hit in collection_search(handbook, "借阅图书")] == [handbook.pk]


def test_no_term_in_common_finds_nothing(handbook):
    assert collection_search(handbook, "食堂菜单") == []
    assert collection_search(handbook, "？！，。") == []
    assert collection_search(handbook, "   ") == []
    assert collection_search(handbook, "转专业", limit=0) == []


def test_limit_keeps_the_best(handbook):
    every = collection_search(handbook, "学生", limit=100)
    assert len(every) == 6  # the passages that say 学生, or whose title does
    assert _texts(collection_search(handbook, "学生", limit=2)) == _texts(every[:2])


def test_the_index_is_kept_while_the_stamp_holds_and_checked_when_it_changes(handbook, django_assert_num_queries):
    first = keyword_index(handbook)
    with django_assert_num_queries(1):  # the stamp
        assert keyword_index(handbook) is first
    # A write elsewhere (another collection; an indexing job's progress) changes the stamp, not
    # this collection's content: the index is checked (aggregates) and kept, not built again.
    other = KnowledgeCollection.objects.create(slug="other", name="其他", description="其他")
    _document(other, "其他", [("", "转专业")])
    assert keyword_index(handbook) is first
    # An edit of a passage's text in place, with no Django signal, is a change of content.
    passage = KnowledgePassage.objects.get(heading="第五章 宿舍管理")
    with connection.cursor() as cursor:
        cursor.execute(f'UPDATE "{KnowledgePassage._meta.db_table}" SET text = %s WHERE id = %s',
                       ["宿舍晚上十二点熄灯。", passage.pk])
    assert keyword_index(handbook) is not first
    assert _texts(collection_search(handbook, "几点熄灯")) == ["宿舍晚上十二点熄灯。"]


def test_a_renamed_document_is_found_by_its_new_title(handbook):
    assert collection_search(handbook, "细则") == []
    KnowledgeDocument.objects.filter(title="图书馆规则").update(title="图书借阅细则")
    assert _texts(collection_search(handbook, "细则")) == [HANDBOOK["图书馆规则"][0][1]]


def _in_another_thread(work) -> threading.Thread:
    """`work` on a connection of its own (another worker's, or the indexing job's)."""
    def run():
        try:
            work()
        finally:
            connections.close_all()
    thread = threading.Thread(target=run)
    thread.start()
    return thread


@pytest.mark.django_db(transaction=True)
def test_a_change_on_another_connection_is_seen_at_the_next_search(handbook):
    assert collection_search(handbook, "电磁炉") == []
    thread = _in_another_thread(lambda: _document(handbook, "宿舍用电规定", [("用电", "宿舍内禁止使用电磁炉。")]))
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert _texts(collection_search(handbook, "电磁炉")) == ["宿舍内禁止使用电磁炉。"]


@pytest.mark.django_db(transaction=True)
def test_replacing_a_documents_passages_is_atomic_for_a_concurrent_search(handbook, settings):
    """The indexing job replaces a document's passages in one transaction. A search made while it
    is half done (old passages deleted, half the new ones written) sees the old version whole;
    the next one after the commit sees the new version whole."""
    settings.KNOWLEDGE_CAMPUS_SYNONYMS = False  # the query's own words only: the count is exact
    old = [(f"第{n}条", f"旧版规定第{n}条：宿舍卫生每周检查一次。") for n in range(1, 7)]
    new = [(f"第{n}条", f"新版规定第{n}条：宿舍卫生每月检查两次。") for n in range(1, 9)]
    document = _document(handbook, "宿舍卫生规定", old)
    assert len(collection_search(handbook, "卫生检查", limit=50)) == len(old)
    halfway, go_on = threading.Event(), threading.Event()

    def replace():
        with transaction.atomic():
            KnowledgePassage.objects.filter(document=document).delete()
            for seq, (heading, text) in enumerate(new):
                KnowledgePassage.objects.create(document=document, seq=seq, heading=heading, text=text)
                if seq == len(new) // 2:
                    halfway.set()
                    assert go_on.wait(timeout=30)

    thread = _in_another_thread(replace)
    try:
        assert halfway.wait(timeout=30)
        during = collection_search(handbook, "卫生检查", limit=50)
    finally:
        go_on.set()
        thread.join(timeout=30)
    assert not thread.is_alive()
    assert sorted(_texts(during)) == sorted(text for _, text in old)
    after = collection_search(handbook, "卫生检查", limit=50)
    assert sorted(_texts(after)) == sorted(text for _, text in new)


def test_migrate_puts_back_triggers_a_rebuilt_table_lost(handbook):
    keyword_index(handbook)
    with connection.cursor() as cursor:  # what SQLite does to a table's triggers when a migration rebuilds it
        for table in stamp_tables():
            if connection.vendor == "sqlite":
                for event in ("insert", "update", "delete"):
                    cursor.execute(f'DROP TRIGGER IF EXISTS "{table}_stamp_{event}"')
            else:
                cursor.execute(f'DROP TRIGGER IF EXISTS "{table}_stamp" ON "{table}"')
    token = KnowledgeStamp.objects.get().token
    KnowledgePassage.objects.filter(heading="借阅").update(text="研究生可借图书二十册。")
    assert KnowledgeStamp.objects.get().token == token  # without them, nothing would tell the workers

    call_command("migrate", verbosity=0)
    KnowledgePassage.objects.filter(heading="借阅").update(text="研究生可借图书三十册。")
    assert KnowledgeStamp.objects.get().token != token
    assert _texts(collection_search(handbook, "研究生借图书")) == ["研究生可借图书三十册。"]


def test_an_index_built_from_rows_searches_without_a_database():
    index = KeywordIndex([(7, "学生手册", "转专业", "每学年受理一次。"), (9, "学生手册", "请假", "请假需辅导员批准。")])
    assert len(index) == 2
    assert [pid for pid, _ in index.search("转专业")] == [7]
    assert index.search("食堂") == [] and KeywordIndex([]).search("转专业") == []


def test_starting_django_loads_no_dictionary(tmp_path):
    """rjieba builds its dictionary when imported: a worker pays for it at its first search, not
    at start-up (the admin and the tools import knowledge_app.search)."""
    code = (
        "import sys, django; django.setup(); import knowledge_app.search, knowledge_app.keyword_index; "
        "print(sorted(name for name in ('rjieba', 'bm25s', 'jieba') if name in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=BASE_DIR, env=project_env(tmp_path, DJANGO_SETTINGS_MODULE="campus_agent.settings"),
                          capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"


def test_the_compact_vocabulary_finds_each_term_and_no_other():
    vocab = {term: column for column, term in enumerate(["转专业", "专业", "转", "gpa", "3.0", "奖学金", "奖学", "a1"])}
    columns = TermColumns(vocab)
    assert len(columns) == len(vocab)
    assert {term: columns.get(term) for term in vocab} == vocab
    assert [columns.get(term) for term in ("专", "转专", "奖学金额", "", "gp", "3", "zzz")] == [None] * 7
    assert TermColumns({}).get("转") is None
