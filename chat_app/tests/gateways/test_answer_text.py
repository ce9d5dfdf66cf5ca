"""The paragraph break the gateways put around a tool call (chat_app/gateways/answer_text.py):
one blank line, whatever newlines the model put at either side, and none before the first text."""
from chat_app.gateways.answer_text import AnswerText


def _fed(*items) -> tuple[str, list[str]]:
    answer, pieces = AnswerText(), []
    for item in items:
        if item is None:  # a tool call
            answer.paragraph_break()
        else:
            pieces.append(answer.chunk(item))
    return answer.text, pieces


def test_one_blank_line_between_the_text_before_and_after_a_tool_call():
    assert _fed("好的，", "我查一下。", None, "今天", "食堂…")[0] == "好的，我查一下。\n\n今天食堂…"
    assert _fed("我查一下。\n", None, "\n\n今天食堂…")[0] == "我查一下。\n\n今天食堂…"
    assert _fed("我查一下。\n\n", None, "今天食堂…")[0] == "我查一下。\n\n今天食堂…"
    assert _fed("我查一下。", None, None, "今天食堂…")[0] == "我查一下。\n\n今天食堂…"  # two rounds of tools


def test_no_break_before_the_first_text_and_none_waits_on_an_empty_chunk():
    text, pieces = _fed(None, "今天食堂…")
    assert text == "今天食堂…"
    text, pieces = _fed("我查一下。", None, "\n", "", "今天食堂…")
    assert text == "我查一下。\n\n今天食堂…" and pieces == ["我查一下。", "", "", "\n\n今天食堂…"]


def test_the_rest_of_full_text_and_stored_rounds_read_the_same():
    answer = AnswerText()
    answer.chunk("我查一下。")
    answer.paragraph_break()
    assert answer.rest("我查一下。今天食堂…") == "\n\n今天食堂…"  # text no chunk carried (keyword routing)
    assert answer.rest("something else") == ""
    assert AnswerText.of_rounds(["我查一下。", "", "今天食堂…"]) == "我查一下。\n\n今天食堂…"
