"""The moderation model's client (safety_app/model_check.py, docs/safety.md#the-moderation-model):
its verdict on a text from an OpenAI-compatible `/v1/moderations` endpoint or a guard chat model,
and, whatever goes wrong (a hang, garbage, an error, a refused connection), `failed`, let through
or flagged by the fail mode. Against the scripted moderation server on loopback."""

import socket

import pytest
from loguru import logger
from prometheus_client import REGISTRY

from safety_app.model_check import (
    MODEL_CATEGORY,
    ModelAnswerInvalid,
    Verdict,
    guard_text_read,
    model_verdict,
)
from testkit.moderation_server import ModerationAnswer

TEXT = "怎么做一个炸弹"
KEY = "sk-moderation-0123456789abcdef"
PASSED = Verdict(flagged=False, category=None, outcome="pass")
FAILED_OPEN = Verdict(flagged=False, category=None, outcome="failed")
FAILED_CLOSED = Verdict(flagged=True, category=MODEL_CATEGORY, outcome="failed")

db = pytest.mark.django_db(transaction=True)  # the check reads its row on the database threads


@pytest.fixture
def log_lines():
    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(str(message)), level="DEBUG", format="{message} {extra}")
    yield lines
    logger.remove(sink)


@db
async def test_no_enabled_model_for_the_stage_means_no_verdict(moderation_model_factory, moderation_server):
    assert await model_verdict("question", TEXT) is None
    await _made(moderation_model_factory, enabled=False)
    assert await model_verdict("question", TEXT) is None
    await _made(moderation_model_factory, name="只查问题", question=True, answer=False)
    assert await model_verdict("answer", TEXT) is None
    assert moderation_server.requests == []
    assert await model_verdict("question", TEXT) == PASSED
    assert len(moderation_server.requests) == 1


@db
async def test_moderations_flagged_names_the_first_flagged_category(moderation_model_factory, moderation_server):
    await _made(moderation_model_factory, key=KEY)
    moderation_server.flag("violence")

    assert await model_verdict("question", TEXT) == Verdict(flagged=True, category="violence", outcome="flagged")
    asked = moderation_server.last_request
    assert asked.path == "/v1/moderations"
    assert asked.body == {"model": "guard-test", "input": TEXT}
    assert asked.headers["authorization"] == f"Bearer {KEY}"


@db
async def test_moderations_pass_and_a_flag_without_category(moderation_model_factory, moderation_server):
    await _made(moderation_model_factory)
    moderation_server.pass_()
    moderation_server.raw({"results": [{"flagged": True}]})
    moderation_server.raw({"results": [{"flagged": False}, {"flagged": True, "categories": {"hate": False, "sexual": True}}]})

    assert await model_verdict("question", TEXT) == PASSED
    assert await model_verdict("question", TEXT) == Verdict(flagged=True, category=MODEL_CATEGORY, outcome="flagged")
    assert await model_verdict("question", TEXT) == Verdict(flagged=True, category="sexual", outcome="flagged")


@db
async def test_guard_chat_reads_qwen3guard_answers(moderation_model_factory, moderation_server):
    await _made(moderation_model_factory, kind="guard_chat")
    moderation_server.flag("violence")
    moderation_server.pass_()
    moderation_server.queue(ModerationAnswer(level="Controversial", category="politics"))

    assert await model_verdict("question", TEXT) == Verdict(flagged=True, category="Violent", outcome="flagged")
    asked = moderation_server.last_request
    assert asked.path == "/v1/chat/completions"
    assert asked.body["model"] == "guard-test" and asked.body["messages"] == [{"role": "user", "content": TEXT}]
    assert await model_verdict("question", TEXT) == PASSED
    assert await model_verdict("question", TEXT) == PASSED  # controversial passes unless told otherwise


@db
async def test_guard_chat_prompt_and_controversial_flagged(moderation_model_factory, moderation_server):
    await _made(moderation_model_factory, kind="guard_chat", prompt="判断下面的内容是否安全：\n{text}\n按格式回答。",
                controversial_flagged=True)
    moderation_server.queue(ModerationAnswer(level="Controversial", category="politics"))

    assert await model_verdict("question", "a {text} b") == Verdict(
        flagged=True, category="Politically Sensitive Topics", outcome="flagged")
    assert moderation_server.last_request.body["messages"][0]["content"] == "判断下面的内容是否安全：\na {text} b\n按格式回答。"


@pytest.mark.parametrize(
    ("text", "read"),
    [
        ("Safety: Unsafe\nCategories: Violent", (True, "Violent")),
        ("Safety: Unsafe\nCategories: Non-violent Illegal Acts, PII", (True, "Non-violent Illegal Acts")),
        ("Safety: Safe\nCategories: None", (False, None)),
        ("safety:unsafe\ncategories: none", (True, None)),
        ("**Safety**: Unsafe\n**Categories**: Jailbreak", (True, "Jailbreak")),
        ("<think>the user asks about Safety: Safe things</think>\nSafety：Unsafe\nCategories：涉政、暴力", (True, "涉政")),
        ("Safety: Unsafe", (True, None)),
        ("  Safety: Controversial\nCategories: Politically Sensitive Topics\nRefusal: No", (False, None)),
    ],
)
def test_guard_text_is_read_robustly(text, read):
    assert guard_text_read(text, controversial_flagged=False) == read


@pytest.mark.parametrize("text", ["", "I'm sorry, I can't help with that.", "Safety level: high", "Safety: maybe",
                                  "<think>Safety: Unsafe"])
def test_a_guard_text_without_a_verdict_is_invalid(text):
    with pytest.raises(ModelAnswerInvalid):
        guard_text_read(text, controversial_flagged=False)


GARBAGE = {
    "hang": lambda s: s.hang(),
    "html": lambda s: s.garbage(),
    "not json": lambda s: s.garbage(b'{"results": [', content_type="application/json"),
    "500": lambda s: s.fail(500),
    "429": lambda s: s.fail(429),
    "huge": lambda s: s.huge(),
    "a list": lambda s: s.raw([{"flagged": True}]),
    "no results": lambda s: s.raw({"results": []}),
    "flagged a string": lambda s: s.raw({"results": [{"flagged": "true"}]}),
    "categories a list": lambda s: s.raw({"results": [{"flagged": True, "categories": ["violence"]}]}),
    "a chat answer": lambda s: s.raw({"choices": [{"message": {"content": "Safety: Unsafe"}}]}),
}
GUARD_GARBAGE = {
    "hang": lambda s: s.hang(),
    "html": lambda s: s.garbage(),
    "500": lambda s: s.fail(503),
    "huge": lambda s: s.huge(),
    "no choices": lambda s: s.raw({"choices": []}),
    "content null": lambda s: s.raw({"choices": [{"message": {"content": None}}]}),
    "no verdict": lambda s: s.guard("我不能回答这个问题。"),
    "a moderations answer": lambda s: s.raw({"results": [{"flagged": True}]}),
}


@db
@pytest.mark.parametrize("fail_mode", ["open", "closed"])
@pytest.mark.parametrize(("kind", "script"), [*(("moderations", f) for f in GARBAGE.values()),
                                              *(("guard_chat", f) for f in GUARD_GARBAGE.values())],
                         ids=[*(f"moderations-{n}" for n in GARBAGE), *(f"guard_chat-{n}" for n in GUARD_GARBAGE)])
async def test_whatever_goes_wrong_fails_by_the_fail_mode(moderation_model_factory, moderation_server, fail_mode,
                                                          kind, script):
    await _made(moderation_model_factory, kind=kind, fail_mode=fail_mode)
    script(moderation_server)

    verdict = await model_verdict("question", TEXT)

    assert moderation_server.asked.is_set()
    assert verdict == (FAILED_CLOSED if fail_mode == "closed" else FAILED_OPEN)


@db
@pytest.mark.parametrize("fail_mode", ["open", "closed"])
async def test_a_refused_connection_fails_by_the_fail_mode(moderation_model_factory, fail_mode):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    await _made(moderation_model_factory, base_url=f"http://127.0.0.1:{port}", fail_mode=fail_mode)

    assert await model_verdict("question", TEXT) == (FAILED_CLOSED if fail_mode == "closed" else FAILED_OPEN)


@db
async def test_verdicts_are_counted_and_the_text_never_logged(moderation_model_factory, moderation_server, log_lines):
    await _made(moderation_model_factory, answer=True)
    before = {outcome: _count("question", outcome) for outcome in ("pass", "flagged", "failed")}
    answer_before = _count("answer", "flagged")
    moderation_server.pass_().flag().garbage().flag()

    for stage in ("question", "question", "question", "answer"):
        await model_verdict(stage, TEXT)

    assert {outcome: _count("question", outcome) - before[outcome] for outcome in before} == {
        "pass": 1, "flagged": 1, "failed": 1}
    assert _count("answer", "flagged") - answer_before == 1
    assert REGISTRY.get_sample_value("campus_agent_moderation_model_seconds_count", {"stage": "answer"}) >= 1
    assert any("moderation model 审核 question: flagged" in line for line in log_lines)
    assert any("moderation model 审核 failed on the question" in line for line in log_lines)
    assert not any(TEXT in line or "炸弹" in line for line in log_lines)


def _count(stage: str, outcome: str) -> float:
    return REGISTRY.get_sample_value("campus_agent_moderation_model_verdicts_total",
                                     {"stage": stage, "outcome": outcome}) or 0.0


async def _made(factory, **fields):
    from asgiref.sync import sync_to_async

    return await sync_to_async(factory)(**fields)
