"""A collection's synonyms widen the keyword search to what students say (knowledge_app/synonyms.py)."""

from pathlib import Path

import pytest

from knowledge_app.indexing import documents_index_waiting
from knowledge_app.ingest import document_add
from knowledge_app.models import KnowledgeCollection
from knowledge_app.search import collection_search
from knowledge_app.synonyms import GROUP_MAX_WORDS, campus_synonym_groups, query_expanded, synonym_groups

HANDBOOK = Path(__file__).resolve().parents[2] / "demo_app" / "knowledge"


def test_groups_are_lines_of_two_words_or_more():
    text = "宿舍 寝室，宿舍楼\n\n孤词\n不及格、挂科、挂了\nGPA / 绩点\n" + " ".join(f"w{i}" for i in range(50))
    groups = synonym_groups(text)
    assert groups[:3] == [("宿舍", "寝室", "宿舍楼"), ("不及格", "挂科", "挂了"), ("gpa", "绩点")]
    assert len(groups[3]) == GROUP_MAX_WORDS


def test_a_question_is_widened_by_the_groups_it_says_a_word_of(settings):
    settings.KNOWLEDGE_CAMPUS_SYNONYMS = False
    synonyms = "宿舍 寝室 宿舍楼\n不及格 挂科 挂了\n图书馆 图书室"
    assert query_expanded("寝室几点关门？", synonyms) == "寝室几点关门？ 宿舍 宿舍楼"
    assert query_expanded("大一挂了一门课", synonyms) == "大一挂了一门课 不及格 挂科"
    assert query_expanded("奖学金有多少", synonyms) == "奖学金有多少"


@pytest.mark.django_db
def test_search_finds_what_the_document_says_in_other_words(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path
    settings.KNOWLEDGE_CAMPUS_SYNONYMS = False
    collection = KnowledgeCollection.objects.create(slug="dorm", name="宿舍", description="宿舍管理规定")
    document_add(collection=collection, name="dormitory.md", data=(HANDBOOK / "dormitory.md").read_bytes())
    documents_index_waiting()
    question = "寝室楼晚上几点锁门"
    without = collection_search(collection, question, limit=1)
    collection.synonyms = "宿舍 寝室\n关门 锁门"
    with_synonyms = collection_search(collection, question, limit=1)
    assert "23:00 关门" in with_synonyms[0].passage.text
    assert not without or "23:00 关门" not in without[0].passage.text


def test_the_campus_list_is_read_beside_the_collections_own(settings):
    settings.KNOWLEDGE_CAMPUS_SYNONYMS = True
    widened = query_expanded("国奖一年多少钱", "国奖 国家级奖项")
    # the collection's group first, then the campus list's; a word both say is added once
    assert widened.startswith("国奖一年多少钱 国家级奖项 ")
    assert "国家奖学金" in widened.split()
    assert widened.count("国家级奖项") == 1
    settings.KNOWLEDGE_CAMPUS_SYNONYMS = False
    assert query_expanded("国奖一年多少钱", "") == "国奖一年多少钱"


def test_the_campus_list_has_no_word_that_would_match_everywhere():
    """A word is matched inside the question's text: one character (「借」「还」) would widen most
    questions, and a word in two groups would join them."""
    groups = campus_synonym_groups()
    assert len(groups) > 50
    words = [word for group in groups for word in group]
    assert all(len(word) >= 2 for word in words), [word for word in words if len(word) < 2]
    assert len(words) == len(set(words)), sorted({word for word in words if words.count(word) > 1})


@pytest.mark.django_db
def test_the_campus_list_finds_what_students_call_by_its_slang(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path
    collection = KnowledgeCollection.objects.create(slug="library", name="图书馆", description="借阅规则")
    document_add(collection=collection, name="library.md", data=(HANDBOOK / "library.md").read_bytes())
    documents_index_waiting()
    question = "书弄丢了怎么办"
    settings.KNOWLEDGE_CAMPUS_SYNONYMS = False
    without = collection_search(collection, question, limit=1)
    settings.KNOWLEDGE_CAMPUS_SYNONYMS = True
    with_campus = collection_search(collection, question, limit=1)
    assert "遗失" in with_campus[0].passage.text
    assert not without or "遗失" not in without[0].passage.text
