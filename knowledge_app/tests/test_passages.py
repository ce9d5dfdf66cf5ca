"""Passages cut along a document's structure (issue 45 point 2,
docs/knowledge.md#how-documents-are-read-and-cut): along headings and paragraphs, long paragraphs at
Chinese sentence ends, short ones merged, a table's rows kept together, each passage with its
heading path and the page it starts on."""

import re

from knowledge_app.parsing import Block
from knowledge_app.passages import (
    PASSAGE_MAX_CHARS,
    PASSAGE_MIN_CHARS,
    heading_joined,
    passages_cut,
)

CHAPTER = ("第三章 学籍管理",)
ARTICLE = (*CHAPTER, "第二十条")


def _sentence(n: int, length: int, end: str = "。") -> str:
    return f"第{n}句" + "学" * (length - len(f"第{n}句") - 1) + end


def test_a_long_paragraph_is_cut_at_sentence_ends_and_no_passage_is_over_the_cap():
    ends = "。！？；!?;"
    sentences = [_sentence(n, 37 + n % 50, ends[n % len(ends)]) for n in range(60)]
    sentences[7] = sentences[7][:-1] + "。”"  # a closing quote stays with its sentence
    text = "".join(sentences)
    assert len(text) > 3 * PASSAGE_MAX_CHARS
    passages = passages_cut([Block("heading", "第二十条", CHAPTER, 4), Block("paragraph", text, ARTICLE, 4)])
    assert len(passages) > 3
    assert "".join(p.text for p in passages) == text  # nothing lost, nothing repeated
    assert all(len(p.text) <= PASSAGE_MAX_CHARS for p in passages)
    assert all(p.text.endswith(tuple(ends) + ("”",)) for p in passages)  # each ends a sentence
    assert all(len(p.text) >= PASSAGE_MIN_CHARS for p in passages)
    assert [(p.seq, p.heading, p.page) for p in passages] == [
        (n, "第三章 学籍管理 › 第二十条", 4) for n in range(1, len(passages) + 1)
    ]


def test_a_sentence_over_the_cap_is_cut_at_a_comma_or_where_it_must():
    text = "，".join(["学" * 150] * 6) + "。" + "习" * 1500
    passages = passages_cut([Block("paragraph", text, (), None)])
    assert "".join(p.text for p in passages) == text
    assert all(len(p.text) <= PASSAGE_MAX_CHARS for p in passages)
    assert passages[0].text.endswith("，")


def test_short_paragraphs_under_one_heading_are_merged_and_never_across_headings():
    blocks = [
        Block("heading", "第一章 总则", (), 1),
        Block("paragraph", "第一条 本规定适用于全日制本科生。", ("第一章 总则",), 1),
        Block("paragraph", "本规定由教务处负责解释。", ("第一章 总则",), 2),
        Block("heading", "第二章 请假", (), 2),
        Block("paragraph", "学生请假须经批准。", ("第二章 请假",), 2),
        Block("paragraph", "学" * 250 + "。", ("第二章 请假",), 3),
        Block("paragraph", "请假超过一周的，须经学院批准。", ("第二章 请假",), 3),
    ]
    assert [(p.seq, p.text, p.heading, p.page) for p in passages_cut(blocks)] == [
        (1, "第一条 本规定适用于全日制本科生。\n本规定由教务处负责解释。", "第一章 总则", 1),  # the page it starts on
        (2, "学生请假须经批准。\n" + "学" * 250 + "。", "第二章 请假", 2),
        (3, "请假超过一周的，须经学院批准。", "第二章 请假", 3),  # the one before is long enough
    ]


def test_a_tables_rows_stay_with_its_heading_and_a_long_table_repeats_its_header():
    path = ("附表 奖学金等级",)
    rows = [Block("row", "等级 | 金额 | 比例", path, 7)]
    rows += [Block("row", f"第{n}等 | {n * 1000} 元 | " + "说明" * 20, path, 7 + n // 10) for n in range(1, 31)]
    blocks = [
        Block("heading", "附表 奖学金等级", (), 7),
        Block("paragraph", "各等级金额如下：", path, 7),
        *rows,
        Block("heading", "附则", (), 9),
        Block("paragraph", "本办法自发布之日起施行。", ("附则",), 9),
    ]
    passages = passages_cut(blocks)
    table = [p for p in passages if p.heading == "附表 奖学金等级"]
    assert table[0].text.startswith("各等级金额如下：\n等级 | 金额 | 比例\n第1等")  # the sentence that introduces it
    assert len(table) > 1
    assert all(p.text.startswith("等级 | 金额 | 比例\n") for p in table[1:])
    assert all(len(p.text) <= PASSAGE_MAX_CHARS for p in passages)
    table_rows = [line for p in table for line in p.text.split("\n") if line.startswith("第")]
    assert table_rows == [row.text for row in rows[1:]]  # every row once, in order
    assert [p.page for p in table] == [7] + [int(re.match(r"第(\d+)等", p.text.split("\n")[1]).group(1)) // 10 + 7 for p in table[1:]]
    assert passages[-1].heading == "附则"


def test_body_text_after_a_closed_heading_level_gets_its_own_path():
    blocks = [
        Block("paragraph", "前言。", (), 1),
        Block("heading", "第一章 总则", (), 1),
        Block("heading", "第一条", ("第一章 总则",), 1),
        Block("paragraph", "条文。", ("第一章 总则", "第一条"), 1),
        Block("heading", "第二章 学籍", (), 2),  # a chapter with no text of its own: no passage
        Block("heading", "第一节 注册", ("第二章 学籍",), 2),
        Block("paragraph", "注册。", ("第二章 学籍", "第一节 注册"), 2),
    ]
    assert [(p.text, p.heading) for p in passages_cut(blocks)] == [
        ("前言。", ""),
        ("条文。", "第一章 总则 › 第一条"),
        ("注册。", "第二章 学籍 › 第一节 注册"),
    ]


def test_a_heading_path_over_the_fields_length_keeps_its_nearest_headings():
    path = tuple(f"第{n}节 " + "很长的标题" * 10 for n in range(1, 20))
    joined = heading_joined(path)
    assert len(joined) <= 500
    assert joined.startswith("… › ") and joined.endswith(path[-1])
    assert heading_joined(("第三章 学籍管理", "第二十条")) == "第三章 学籍管理 › 第二十条"


def test_a_heading_with_nothing_under_it_is_text_of_its_section_not_lost():
    article = ("第二章 奖学金", "第八条")
    blocks = [
        Block("heading", "第二章 奖学金", (), 3),
        Block("heading", "第八条", ("第二章 奖学金",), 3),
        Block("paragraph", "第八条 申请者应当具备下列条件：", article, 3),
        Block("heading", "一、品德优良", article, 3),  # short, no punctuation: read as headings
        Block("heading", "二、成绩优秀", article, 4),
        Block("heading", "第九条", ("第二章 奖学金",), 4),
        Block("paragraph", "第九条 评定每年进行一次。", ("第二章 奖学金", "第九条"), 4),
        Block("heading", "附则", (), 5),
    ]
    assert [(p.text, p.heading, p.page) for p in passages_cut(blocks)] == [
        ("第八条 申请者应当具备下列条件：\n一、品德优良\n二、成绩优秀", "第二章 奖学金 › 第八条", 3),
        ("第九条 评定每年进行一次。", "第二章 奖学金 › 第九条", 4),
        ("附则", "", 5),
    ]
