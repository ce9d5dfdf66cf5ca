"""docs/demo.md says what the demo does (issue 42: it said "three" above a table of four): the
questions that "work out of the box" are counted right, and each is a demo routing case that must
reach a tool (test_routing_check.py holds that the cases pass with keyword routing)."""
import re

from django.conf import settings

from demo_app.routing_cases import DEMO_CASES

NUMBERS = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6}


def test_the_out_of_the_box_table_is_counted_right_and_each_question_is_a_case():
    text = (settings.BASE_DIR / "docs" / "demo.md").read_text()
    said = re.search(r"These\s+(\w+)\s+work out of the box:\n\n((?:\|.*\n)+)", text)
    assert said, "docs/demo.md lost its out-of-the-box table"
    rows = [line for line in said.group(2).splitlines()[2:] if line.strip()]  # past the header and |---|
    questions = [re.search(r"`([^`]+)`", row).group(1) for row in rows]
    assert NUMBERS[said.group(1)] == len(rows)
    routed = {case.question for case in DEMO_CASES if case.must_call}
    assert set(questions) <= routed
