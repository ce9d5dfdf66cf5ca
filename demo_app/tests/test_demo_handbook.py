"""The demo handbook (demo_app/knowledge/, issue 45 point 6) and its evaluation cases: the committed
PDF and DOCX read back with the libraries a parser uses, say what their Markdown says (no one
edited src/ and forgot build.py), and every case points at a place that exists: its document, its
page in the PDF, its chapter, and its article in that chapter on that page. A case that points
nowhere would count as a miss for any search, and knowledge_eval's figures would mean nothing."""
import re
from functools import cache

import docx
import pypdf
import pytest
import yaml
from docx.text.paragraph import Paragraph

from demo_app.knowledge import DEMO_DOCUMENTS, EVAL_CASES, EVAL_CASES_2, EVAL_CASES_3
from demo_app.knowledge.build import is_table, parse

DOCUMENTS = {document.title: document for document in DEMO_DOCUMENTS}
CASE_FILES = {path.name: yaml.safe_load(path.read_text(encoding="utf-8"))["cases"] for path in (EVAL_CASES, EVAL_CASES_2, EVAL_CASES_3)}
CASES = CASE_FILES[EVAL_CASES.name]
ALL_CASES = [(name, case) for name, cases in CASE_FILES.items() for case in cases]
ARTICLE_START = re.compile(r"^(第[一二三四五六七八九十百]+条)\u3000", re.MULTILINE)
CHAPTER_LINE = re.compile(r"^第[一二三四五六七八九十]+章 ")
PAGE_NUMBER = re.compile(r"^- \d+ -$", re.MULTILINE)


def squeeze(text: str) -> str:
    return re.sub(r"\s+", "", text)


@cache
def pdf_pages(title: str) -> tuple[str, ...]:
    return tuple(page.extract_text() for page in pypdf.PdfReader(DOCUMENTS[title].path).pages)


@cache
def chapters(title: str) -> dict[str, list[str]]:
    """The document's chapter headings as its file has them, each with the 第X条 that start
    paragraphs under it: DOCX from its Heading 1 paragraphs, Markdown from its `##` lines, the
    PDF from its lines that are chapter headings."""
    document = DOCUMENTS[title]
    found: dict[str, list[str]] = {}
    if document.path.suffix == ".pdf":
        heading = None  # page 1 opens with the title, its chapter on the next line
        for line in "\n".join(pdf_pages(title)).splitlines():
            if CHAPTER_LINE.match(line):
                heading = found.setdefault(line.strip(), [])
            elif heading is not None:
                heading.extend(ARTICLE_START.findall(line))
    elif document.path.suffix == ".docx":
        heading = None
        for paragraph in docx.Document(document.path).paragraphs:
            if paragraph.style.name == "Heading 1":
                heading = found.setdefault(paragraph.text.strip(), [])
            elif heading is not None and (article := ARTICLE_START.match(paragraph.text)):
                heading.append(article.group(1))
    else:
        for chapter in parse(document.path).chapters:
            found[chapter.heading] = [
                article.group(1) for block in chapter.blocks
                if not is_table(block) and (article := ARTICLE_START.match(block[0]))
            ]
    return found


def test_the_pdf_has_pages_each_starting_with_its_chapter_and_reads_back_as_its_markdown():
    document = DOCUMENTS["转专业管理规定（示例）"]
    reader = pypdf.PdfReader(document.path)
    assert reader.metadata.title == document.title
    pages = pdf_pages(document.title)
    book = parse(document.source_path)
    assert len(pages) == len(book.chapters) > 1
    for number, (text, chapter) in enumerate(zip(pages, book.chapters, strict=True), start=1):
        lines = text.splitlines()
        assert lines[-1] == f"- {number} -"
        assert chapter.heading in lines[:3], (number, lines[:3])  # the first page has the title above
    assert squeeze(PAGE_NUMBER.sub("", "\n".join(pages))) == squeeze(book.text()), "rebuild: python -m demo_app.knowledge.build"
    assert document.path.stat().st_size < 200_000


def test_the_docx_has_heading_styles_a_table_of_amounts_and_reads_back_as_its_markdown():
    document = DOCUMENTS["奖学金评定办法（示例）"]
    read = docx.Document(document.path)
    book = parse(document.source_path)
    assert read.core_properties.title == document.title
    assert [p.text for p in read.paragraphs if p.style.name == "Heading 1"] == [c.heading for c in book.chapters]
    [table] = read.tables
    rows = [[cell.text for cell in row.cells] for row in table.rows]
    assert rows[0][:2] == ["奖学金类别", "金额（元/人·年）"]
    assert ["国家奖学金", "10000", "按上级下达名额"] in rows
    text = "".join(
        block.text if isinstance(block, Paragraph) else "".join(cell.text for row in block.rows for cell in row.cells)
        for block in read.iter_inner_content()
    )
    assert squeeze(text) == squeeze(book.text()), "rebuild: python -m demo_app.knowledge.build"
    assert document.path.stat().st_size < 200_000


def test_each_markdown_document_names_itself_as_the_manifest_does():
    for document in DEMO_DOCUMENTS:
        assert parse(document.source_path).title == document.title
        assert document.path.is_file()


@pytest.mark.parametrize("cases", CASE_FILES.values(), ids=CASE_FILES.keys())
def test_there_are_enough_cases_each_question_once_and_every_document_asked_about(cases):
    questions = [case["question"] for case in cases]
    assert len(questions) >= 40
    assert len(set(questions)) == len(questions)
    assert {case["document"] for case in cases} == set(DOCUMENTS)


def test_no_set_asks_another_sets_questions():
    """Each set was written without reading the others: a question in two would be one copied, and
    would count twice in any comparison of them."""
    sets = [{case["question"] for case in cases} for cases in CASE_FILES.values()]
    shared = {question for i, one in enumerate(sets) for other in sets[i + 1:] for question in one & other}
    assert not shared  # only these are shown on failure, not the sets' other questions


def test_the_headline_question_is_answered_by_one_article_on_one_page():
    [case] = [case for case in CASES if case["question"] == "转专业需要满足什么条件？"]
    assert (case["document"], case["page"], case["article"]) == ("转专业管理规定（示例）", 2, "第四条")
    page = pdf_pages(case["document"])[case["page"] - 1]
    article = page[page.index("第四条\u3000"):page.index("第五条\u3000")]
    assert "须同时满足下列条件" in article and "平均学分绩点" in article


@pytest.mark.parametrize(("file", "case"), ALL_CASES, ids=[f"{name}:{case['question']}" for name, case in ALL_CASES])
def test_each_case_points_at_a_place_that_exists(file, case):
    assert set(case) <= {"question", "document", "page", "heading", "article"}
    assert case["document"] in DOCUMENTS, "no such document"
    title = case["document"]
    paged = DOCUMENTS[title].path.suffix == ".pdf"
    assert ("page" in case) == paged, "a page for the PDF, and only for it"
    assert case["heading"] in chapters(title), f"no such heading in {title}"
    assert case["article"] in chapters(title)[case["heading"]], f"{case['article']} is not under {case['heading']}"
    if paged:
        pages = pdf_pages(title)
        assert 1 <= case["page"] <= len(pages), "no such page"
        text = pages[case["page"] - 1]
        assert case["heading"] in text and case["article"] in ARTICLE_START.findall(text), "not on that page"
