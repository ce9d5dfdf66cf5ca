"""A text that arrives in pieces never shows a listed word, however the pieces split it
(safety_app/screen.py, docs/safety.md#the-answer-while-it-streams)."""

import pytest

from safety_app.matcher import Entry, Matcher, normalised
from safety_app.screen import HELD_MAX_MIN, StreamScreen

BLOCK = Entry(category="涉政", action="block")
MASK = Entry(category="广告", action="mask")
TEN = "甲乙丙丁戊己庚辛壬癸"  # a ten-character word


@pytest.fixture
def matcher():
    return Matcher({"法轮": BLOCK, TEN: BLOCK, "代考": MASK, "vx": MASK})


def _pieces(text: str, count: int) -> list[str]:
    """`text` cut into `count` pieces of about the same length."""
    step = -(-len(text) // count)
    return [text[i : i + step] for i in range(0, len(text), step)]


def _run(matcher, pieces):
    screen, shown, blocked = StreamScreen(matcher), [], None
    for piece in pieces:
        result = screen.feed(piece)
        shown.append(result.shown)
        blocked = blocked or result.blocked
    if blocked is None:
        result = screen.end()
        shown.append(result.shown)
    return "".join(shown), blocked, screen


@pytest.mark.parametrize(("word", "count"), [("法轮", 1), ("法轮", 2), (TEN, 1), (TEN, 2), (TEN, 10)])
def test_a_blocked_word_split_over_pieces_never_shows_any_part_of_it(matcher, word, count):
    text = "前面的话。" + word + "后面的话"
    pieces = _pieces(word, count)
    assert len(pieces) == count
    shown, blocked, screen = _run(matcher, ["前面的话。", *pieces, "后面的话"])
    assert blocked is not None and blocked.category == "涉政"
    flat = normalised(shown)[0]
    assert not any(flat.endswith(word[:n]) for n in range(1, len(word) + 1)), shown
    assert "后面" not in shown
    assert word in screen.held  # what it stopped, for the audit
    assert shown == text[: len(shown)]


@pytest.mark.parametrize(
    "pieces",
    [["我想了解法", " ", "轮"], ["法", ".", "轮"], ["Ｆ", "ａ"], ["法\u200b", "轮"], ["法", " - _ ", "轮"]],
)
def test_evasions_across_pieces_are_caught(pieces):
    matcher = Matcher({"法轮": BLOCK, "fa": BLOCK})
    shown, blocked, _ = _run(matcher, pieces)
    assert blocked is not None and "轮" not in shown and "ａ" not in shown


def test_a_mask_word_split_over_pieces_is_masked_whole(matcher):
    shown, blocked, _ = _run(matcher, ["找人代", " ", "考，加 Ｖ", "Ｘ：abc"])
    assert blocked is None
    assert shown == "找人***，加 **：abc"


def test_a_mask_word_does_not_hide_a_longer_block_word_it_starts():
    matcher = Matcher({"ab": MASK, "abcd": BLOCK})
    shown, blocked, _ = _run(matcher, ["xa", "b", "c", "d"])
    assert blocked is not None and blocked.category == "涉政" and shown == "x"


def test_what_is_released_is_final_and_everything_ends_up_shown(matcher):
    text = "食堂今天中午有红烧肉，晚上有饺子，营业到二十一点。" * 3
    for count in (1, 2, 7, len(text)):
        shown, blocked, _ = _run(matcher, _pieces(text, count))
        assert blocked is None and shown == text


def test_the_hold_back_is_only_as_long_as_the_longest_word():
    screen = StreamScreen(Matcher({"法轮": BLOCK}))
    assert screen.feed("你好").shown == "你"  # one character could still start 法轮
    assert screen.feed("吗").shown == "好"
    assert screen.end().shown == "吗"


def test_no_words_make_a_pass_through():
    screen = StreamScreen(Matcher({}))
    assert not screen.active
    assert screen.feed("法轮").shown == "法轮" and screen.held == ""


def test_a_run_of_separators_cannot_grow_what_is_held_without_end(matcher):
    screen = StreamScreen(matcher)
    screen.feed("法")
    for _ in range(200):
        screen.feed(" " * 50)
        assert len(screen.held) <= max(HELD_MAX_MIN, 8 * matcher.longest) + 50
