"""ThinkSplitter: a leading <think>…</think> in the content, cut by chunk boundaries anywhere,
comes apart into reasoning and answer (docs/design.md#the-tool-loop). The stream tests (test_provider_streams.py)
take these through the live server; here every cut of the text is tried."""
import itertools

import pytest

from agents_app.runtime.reasoning import CONTENT, REASONING, ThinkSplitter, delta_reasoning, think_stripped


def _split(pieces: list[str]) -> tuple[str, str]:
    splitter = ThinkSplitter()
    out = [p for text in pieces for p in splitter.feed(text)] + splitter.end()
    assert all(text for _, text in out), "no empty piece is handed out"
    return ("".join(t for k, t in out if k == REASONING), "".join(t for k, t in out if k == CONTENT))


def _cuts(text: str, count: int):
    """Every way of cutting `text` into `count` + 1 pieces (empty pieces included)."""
    for points in itertools.combinations_with_replacement(range(len(text) + 1), count):
        bounds = [0, *points, len(text)]
        yield [text[a:b] for a, b in itertools.pairwise(bounds)]


@pytest.mark.parametrize(
    ("text", "reasoning", "answer"),
    [
        ("<think>\n先看食堂菜单。\n</think>\n\n二食堂有红烧肉。", "\n先看食堂菜单。\n", "二食堂有红烧肉。"),
        ("\n<think>想</think>答", "想", "答"),
        ("<think></think>\n\n好的。", "", "好的。"),
        ("<think>还没想完", "还没想完", ""),  # unclosed at the end: all reasoning
        ("<think>想一想</th", "想一想</th", ""),  # a half closing tag at the end is reasoning too
        ("<thi", "", "<thi"),  # half an opening tag, then the end: it was text
        ("你好<think>这不是推理</think>", "", "你好<think>这不是推理</think>"),  # not leading
        ("<thinking>是普通文字", "", "<thinking>是普通文字"),
        ("普通回答。", "", "普通回答。"),
    ],
)
def test_every_cut_gives_the_same_split(text, reasoning, answer):
    for pieces in _cuts(text, 2):
        assert _split(pieces) == (reasoning, answer), pieces


def test_leading_blank_lines_of_an_answer_without_thinking_are_kept():
    assert _split(["\n\n", "# 标题"]) == ("", "\n\n# 标题")


def test_a_close_tag_inside_the_answer_stays_in_the_answer():
    assert _split(["<think>a</think>", "b</think>c"]) == ("a", "b</think>c")


def test_reasoning_streams_as_it_comes_not_at_the_end():
    splitter = ThinkSplitter()
    assert splitter.feed("<think>第一步") == [(REASONING, "第一步")]
    assert splitter.feed("，第二步</") == [(REASONING, "，第二步")]  # "</" may begin the tag
    assert splitter.feed("think>答") == [(CONTENT, "答")]
    assert splitter.answering


@pytest.mark.parametrize(
    ("delta", "expected"),
    [
        ({"reasoning_content": "想"}, "想"),
        ({"reasoning": "想"}, "想"),
        ({"reasoning_content": "想", "reasoning": "想"}, "想"),  # both, same text: read once
        ({"reasoning_content": None, "reasoning": "想"}, "想"),
        ({"reasoning_content": ["想"]}, ""),
        ({"reasoning": {"text": "想"}}, ""),
        ({"content": "答"}, ""),
    ],
)
def test_the_reasoning_field_of_a_delta(delta, expected):
    assert delta_reasoning(delta) == expected


def test_a_stored_reply_loses_its_think_block_only_when_leading():
    assert think_stripped("<think>想</think>\n\n答") == "答"
    assert think_stripped("答<think>x</think>") == "答<think>x</think>"
    reply = "普通回答"
    assert think_stripped(reply) is reply
