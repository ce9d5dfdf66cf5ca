"""The demo's knowledge base: a synthetic student handbook of 示例大学 (our own text, no real
university's), five documents in the formats staff upload, and the questions that measure how
well search finds the answers (eval_cases.yaml). docs/knowledge.md, "The demo handbook".

The PDF and the DOCX are generated from their Markdown under src/ by build.py (a dev tool, run by
hand); the three Markdown documents here are served as they are."""
from dataclasses import dataclass
from pathlib import Path

KNOWLEDGE_DIR = Path(__file__).resolve().parent
EVAL_CASES = KNOWLEDGE_DIR / "eval_cases.yaml"
EVAL_CASES_2 = KNOWLEDGE_DIR / "eval_cases_2.yaml"  # a second set, written without reading the first
EVAL_CASES_3 = KNOWLEDGE_DIR / "eval_cases_3.yaml"  # a third set, written blind to both others and the synonyms


@dataclass(frozen=True)
class DemoDocument:
    title: str  # as the document calls itself, and as eval_cases.yaml names it
    file: str  # what the demo collection loads, in this folder
    source: str  # the Markdown it is written in (itself, or src/… for a generated file)

    @property
    def path(self) -> Path:
        return KNOWLEDGE_DIR / self.file

    @property
    def source_path(self) -> Path:
        return KNOWLEDGE_DIR / self.source


DEMO_DOCUMENTS = (
    DemoDocument("学生手册（示例）", "student-handbook.md", "student-handbook.md"),
    DemoDocument("转专业管理规定（示例）", "transfer-major.pdf", "src/transfer-major.md"),
    DemoDocument("奖学金评定办法（示例）", "scholarship.docx", "src/scholarship.md"),
    DemoDocument("宿舍管理规定（示例）", "dormitory.md", "dormitory.md"),
    DemoDocument("图书馆借阅规则（示例）", "library.md", "library.md"),
)
