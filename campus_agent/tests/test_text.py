"""text_clean and the frame encoder: text from outside always becomes valid (issue 9)."""
import json

import pytest

from campus_agent.base.sse import sse_frame
from campus_agent.base.text import MAX_DEPTH, label_clean, text_clean, text_head, text_valid

FFFD = "\ufffd"


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("半个表情\ud83d", f"半个表情{FFFD}"),  # an emoji cut in half (high surrogate)
        ("\ude00尾巴", f"{FFFD}尾巴"),  # its other half
        ("\ud800\ud800z", f"{FFFD}{FFFD}z"),
        ("完整\ud83d\ude00。", "完整😀。"),  # a pair that arrived as two code points is the emoji
        ("空\x00字\x00符", "空字符"),
        ("\x00", ""),
        ("a\x00\ud800", f"a{FFFD}"),
    ],
)
def test_strings_are_made_valid(raw, clean):
    assert not text_valid(raw)
    assert text_clean(raw) == clean
    assert text_valid(clean)
    clean.encode()


@pytest.mark.parametrize("text", ["plain ascii", "一食堂今天有红烧肉。", "emoji 😀", ""])
def test_valid_strings_are_returned_as_they_are(text):
    assert text_valid(text)
    assert text_clean(text) is text


def test_containers_keys_and_numbers():
    raw = {"k\x00": ["a\ud800", ("b", float("nan"))], 1: {"x": float("inf"), "y": -float("inf"), "z": 1.5},
           "n": None, "t": True}
    assert text_clean(raw) == {"k": [f"a{FFFD}", ["b", None]], 1: {"x": None, "y": None, "z": 1.5},
                               "n": None, "t": True}


def test_data_nested_deeper_than_the_limit_is_not_kept():
    def nested(levels: int):
        value: list = []
        for _ in range(levels - 1):
            value = [value]
        return value

    assert text_clean(nested(MAX_DEPTH)) == nested(MAX_DEPTH)
    deep = text_clean(nested(5000))  # would exceed the recursion limit if followed
    json.dumps(deep)


def _strict(frame: str) -> dict:
    assert frame.startswith("data: ") and frame.endswith("\n\n")
    frame.encode()  # what the response does with it

    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(frame[len("data: "):], parse_constant=refuse)


def test_frame_encoder_never_fails_on_text_and_writes_strict_json():
    payload = {"type": "chunk", "content": "半个\ud83d\x00表情", "chart": {"data": [float("nan"), 2]}}
    assert _strict(sse_frame(payload)) == {"type": "chunk", "content": f"半个{FFFD}表情", "chart": {"data": [None, 2]}}


def test_frame_encoder_keeps_valid_text_readable_and_escaped_text_intact():
    frame = sse_frame({"type": "chunk", "content": "一食堂 \\u0000 原样"})  # a backslash, not a NUL
    assert frame == 'data: {"type":"chunk","content":"一食堂 \\\\u0000 原样"}\n\n'
    assert _strict(frame)["content"] == "一食堂 \\u0000 原样"


def test_text_head():
    assert text_head("食堂助手（演示）：食堂、菜单、吃什么。") == "食堂助手（演示）"
    assert text_head("食堂菜单。关键词：食堂") == "食堂菜单"
    assert text_head("查询") == "查询"
    assert text_head("一") is None
    assert text_head("这是一段很长很长很长很长很长很长的描述，没有早一点的标点") is None
    assert text_head("") is None


# --- label_clean: short texts people read (docs/security.md#text-that-cannot-mislead) -----------


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("invoice\u202efdp.exe", "invoicefdp.exe"),  # RLO: what follows would show reversed
        ("\u2066isolated\u2069 \u2067rtl\u2069 \u2068first\u2069", "isolated rtl first"),
        ("\u202a\u202b\u202c\u202d\u200e\u200f\u061cmarks", "marks"),
        ("line\u2028separator\u2029paragraph", "line separator paragraph"),
        ("tab\tnew\nline\r\nreturn\x85nel", "tab new line return nel"),
        ("\x1b[31mred\x7f\x00", "[31mred"),
        ("zero\u200bwidth\ufeffbom\u00adsoft", "zerowidthbomsoft"),
        ("tag\U000e0041\U000e007f", "tag"),  # tag characters: invisible text
        ("  many   spaces\u3000ideographic  ", "many spaces ideographic"),
        ("e\u0301", "\u00e9"),  # NFC
        ("半个\ud83d", f"半个{FFFD}"),
    ],
)
def test_a_label_keeps_nothing_that_misleads(raw, shown):
    assert label_clean(raw) == shown


@pytest.mark.parametrize(
    "kept",
    ["校园小智 课表", "👩\u200d💻", "👨\u200d👩\u200d👧\u200d👦", "🏳\ufe0f\u200d🌈", "🇨🇳", "1\ufe0f\u20e3", "👍🏽",
     "می\u200cخواهم", "Ω≈ç√", "مرحبا", "שלום"],
)
def test_a_label_keeps_what_people_write(kept):
    assert label_clean(kept) == kept


def test_a_multiline_label_keeps_its_lines():
    assert label_clean("一\r\n二\u2028三\u2029四\n\n五\u202e", multiline=True) == "一\n二\n三\n四\n\n五"
    assert label_clean("\n\n 只有一行 \n", multiline=True) == "只有一行"
