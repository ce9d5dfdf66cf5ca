"""The matcher finds listed words through the usual evasions, in the original text's positions
(safety_app/matcher.py, docs/design.md#content-safety-and-labels)."""

import pytest

from safety_app.matcher import Entry, Hit, Matcher, first_block, masked, normalised

BLOCK = Entry(category="涉政", action="block")
MASK = Entry(category="广告", action="mask")


@pytest.fixture
def matcher():
    return Matcher({"法轮": BLOCK, "Foo Bar": BLOCK, "代考": MASK, "vx": MASK})


@pytest.mark.parametrize(
    "text",
    [
        "我想了解法轮的事",
        "我想了解法 轮的事",  # a space inserted
        "我想了解法.轮的事",  # punctuation
        "我想了解法，轮的事",  # full-width punctuation
        "我想了解法\u200b轮的事",  # a zero-width space
        "我想了解法 - _ 轮的事",
    ],
)
def test_a_blocked_word_is_found_through_inserted_separators(matcher, text):
    hit = first_block(matcher.hits(text))
    assert hit is not None and hit.category == "涉政"
    assert text[hit.start] == "法" and text[hit.end - 1] == "轮"


@pytest.mark.parametrize("text", ["FOOBAR", "ｆｏｏｂａｒ", "Ｆ Ｏ Ｏ－Ｂ ａ ｒ", "f.o.o.b.a.r"])
def test_width_case_and_spacing_do_not_hide_a_latin_word(matcher, text):
    assert [hit.category for hit in matcher.hits(text)] == ["涉政"]


def test_a_text_without_listed_words_has_no_hit(matcher):
    assert matcher.hits("食堂几点开门？foo 和 bar 分开说") == []
    assert Matcher({}).hits("法轮") == []


def test_mask_replaces_exactly_the_matched_span_in_the_original_text(matcher):
    text = "找人代 考，加 Ｖ Ｘ：abc"
    hits = matcher.hits(text)
    assert [(text[h.start : h.end], h.action) for h in hits] == [("代 考", "mask"), ("Ｖ Ｘ", "mask")]
    assert masked(text, hits) == "找人***，加 ***：abc"
    assert first_block(hits) is None


def test_positions_survive_a_character_nfkc_expands():
    # "ﬁ" (one character) becomes "fi": the hit still maps back to the original characters.
    text = "a ﬁre b"
    hits = Matcher({"fire": MASK}).hits(text)
    assert hits == [Hit(start=2, end=5, category="广告", action="mask")]
    assert masked(text, hits) == "a *** b"


def test_normalised_keeps_each_characters_origin():
    assert normalised("Ａ b，Ｃ") == ("abc", [0, 2, 4])


def test_a_word_of_separators_only_is_not_listed():
    assert Matcher({" ，": BLOCK}).size == 0
