"""The moderation model asked about a text (docs/safety.md#the-moderation-model): the enabled
`ModerationModel` that checks the stage, if any, read at each call (one small row), so a change
in admin applies to the next question on every worker.

Two kinds of model, both OpenAI-compatible:

- `moderations`: `POST {base}/moderations` with `{"model", "input"}`; the answer
  `{"results": [{"flagged": bool, "categories": {name: bool}, ...}]}`;
- `guard_chat`: `POST {base}/chat/completions` with the staff's prompt (`{text}` replaced by the
  text) as the user message; the answer's text holds a line `Safety: Safe|Unsafe|Controversial`
  and often `Categories: …` (Qwen3Guard-Gen's format).

Whatever goes wrong — a refused connection, a hang past the timeout (the whole call, not each
read), an HTTP error, an answer over ANSWER_MAX_BYTES, one that is not JSON or not of the shape
above — the outcome is `failed`, and the model's fail mode decides: `open` lets the text through
(the word lists still apply), `closed` treats it as flagged. The text checked is never logged
(it may be the offending content); the outcome is, and counted in the metrics.
"""

import asyncio
import json
import re
import time
from dataclasses import dataclass

import httpx
from loguru import logger

from campus_agent.base import metrics
from campus_agent.base.asyncdb import db_call
from campus_agent.base.loop_clients import LoopClients
from campus_agent.base.text import label_clean
from safety_app.models import PROMPT_PLACEHOLDER, STAGES, ModerationModel

ANSWER_MAX_BYTES = 64 * 1024
CATEGORY_MAX = 50  # a word list's category (what the moderation frame and the stored question carry)
MODEL_CATEGORY = "审核模型"  # a flagged text whose category the model did not name, or a failure when closed
GUARD_MAX_TOKENS = 64
_SAFETY_LINE = re.compile(r"^\W*safety\W*[:：]\s*\W*(safe|unsafe|controversial)\b", re.IGNORECASE | re.MULTILINE)
_CATEGORIES_LINE = re.compile(r"^\W*categor(?:y|ies)\W*[:：]\s*(.*)$", re.IGNORECASE | re.MULTILINE)
_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL)
_NO_CATEGORY = frozenset({"", "none", "n/a", "无"})


@dataclass(frozen=True)
class Verdict:
    flagged: bool  # the text is to be treated as flagged (by the model, or by its failure when closed)
    category: str | None  # what the notice and the stored question carry when flagged
    outcome: str  # "pass" | "flagged" | "failed"


@dataclass(frozen=True)
class ModelConfig:
    """What one call needs of the row, read once."""

    name: str
    kind: str
    url: str
    model: str
    api_key: str
    prompt: str
    timeout: float
    fail_closed: bool
    controversial_flagged: bool


class ModelAnswerInvalid(Exception):
    """The model answered, but not something a verdict can be read from."""


def moderation_model_for(stage: str) -> ModelConfig | None:
    """The enabled moderation model that checks `stage`, or None (sync: one query)."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}")
    row = ModerationModel.objects.filter(enabled=True, **{stage: True}).first()
    return model_config(row) if row is not None else None


def model_config(row: ModerationModel) -> ModelConfig:
    base = row.base_url.strip().rstrip("/")
    base = base if base.lower().endswith("/v1") else f"{base}/v1"
    path = "/moderations" if row.kind == ModerationModel.Kind.MODERATIONS else "/chat/completions"
    return ModelConfig(
        name=row.name, kind=row.kind, url=base + path, model=row.model, api_key=row.api_key_plain(),
        prompt=row.prompt or PROMPT_PLACEHOLDER, timeout=float(row.timeout_sec),
        fail_closed=row.fail_mode == ModerationModel.FailMode.CLOSED, controversial_flagged=row.controversial_flagged,
    )


async def model_verdict(stage: str, text: str) -> Verdict | None:
    """The verdict of the moderation model on `text` at `stage` ("question", "answer",
    "reasoning"); None when no enabled model checks that stage (or there is no text)."""
    if not text or not text.strip():
        return None
    config = await db_call(moderation_model_for, stage)
    if config is None:
        return None
    return await config_verdict(config, stage=stage, text=text)


async def config_verdict(config: ModelConfig, *, stage: str, text: str) -> Verdict:
    """See model_verdict(); for a caller that has read the model once (the segments of an answer)."""
    verdict, failure, seconds = await _checked(config, text)
    if failure is not None:
        # The exception's class only: a message may quote what the model answered.
        logger.warning("moderation model {} failed on the {}: {}", config.name, stage, type(failure).__name__)
    metrics.moderation_model_counted(stage=stage, outcome=verdict.outcome, seconds=seconds)
    logger.debug("moderation model {} {}: {} ({:.3f}s){}", config.name, stage, verdict.outcome, seconds,
                " → blocked" if verdict.flagged else "")
    return verdict


@dataclass(frozen=True)
class Probe:
    verdict: Verdict
    reason: str | None  # why it failed, for staff
    seconds: float


async def model_probe(config: ModelConfig, *, text: str) -> Probe:
    """The model's verdict on a harmless text, and why it failed, for admin's 测试 (neither
    counted nor taken for a student's check)."""
    verdict, failure, seconds = await _checked(config, text)
    return Probe(verdict=verdict, reason=failure_reason(failure, config) if failure else None, seconds=seconds)


def failure_reason(failure: Exception, config: ModelConfig) -> str:
    if isinstance(failure, TimeoutError):
        return f"{config.timeout:g} 秒内没有答完"
    if isinstance(failure, httpx.ConnectError):
        return "无法连接"
    if isinstance(failure, httpx.HTTPError):
        return f"连接出错（{type(failure).__name__}）"
    if isinstance(failure, ModelAnswerInvalid):
        return str(failure)
    if isinstance(failure, ValueError):
        return "回答不是 JSON"
    return type(failure).__name__


async def _checked(config: ModelConfig, text: str) -> tuple[Verdict, Exception | None, float]:
    started = time.monotonic()
    failure = None
    try:
        async with asyncio.timeout(config.timeout):  # the whole call: connect, send, every read
            answer = await _ask(config, text)
        verdict = _verdict_of(config, answer)
    except Exception as exc:  # noqa: BLE001 — whatever the model does, the turn goes on (not CancelledError)
        failure = exc
        verdict = Verdict(flagged=config.fail_closed, category=MODEL_CATEGORY if config.fail_closed else None,
                          outcome="failed")
    return verdict, failure, time.monotonic() - started


# --- the request ----------------------------------------------------------------------------------
_clients = LoopClients()  # one client per event loop


async def _ask(config: ModelConfig, text: str):
    if config.kind == ModerationModel.Kind.MODERATIONS:
        body = {"model": config.model, "input": text}
    else:
        body = {
            "model": config.model, "stream": False, "temperature": 0, "max_tokens": GUARD_MAX_TOKENS,
            "messages": [{"role": "user", "content": config.prompt.replace(PROMPT_PLACEHOLDER, text)}],
        }
    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    async with _clients.get().stream("POST", config.url, json=body, headers=headers) as response:
        if response.status_code != 200:
            raise ModelAnswerInvalid(f"HTTP {response.status_code}")
        received = bytearray()
        async for piece in response.aiter_raw():
            received += piece
            if len(received) > ANSWER_MAX_BYTES:
                raise ModelAnswerInvalid(f"回答超过 {ANSWER_MAX_BYTES // 1024} KB")
    return json.loads(bytes(received))


# --- the answer -----------------------------------------------------------------------------------
def _verdict_of(config: ModelConfig, answer) -> Verdict:
    if config.kind == ModerationModel.Kind.MODERATIONS:
        flagged, category = moderations_answer_read(answer)
    else:
        flagged, category = guard_text_read(guard_chat_answer_text(answer),
                                            controversial_flagged=config.controversial_flagged)
    if not flagged:
        return Verdict(flagged=False, category=None, outcome="pass")
    category = label_clean(category or "")[:CATEGORY_MAX].strip()
    return Verdict(flagged=True, category=category or MODEL_CATEGORY, outcome="flagged")


def moderations_answer_read(answer) -> tuple[bool, str | None]:
    """Flagged, and the first category flagged, from a `/v1/moderations` answer. Raises
    ModelAnswerInvalid when it is not of that shape."""
    results = answer.get("results") if isinstance(answer, dict) else None
    if not isinstance(results, list) or not results:
        raise ModelAnswerInvalid("回答里没有 results")
    flagged, category = False, None
    for result in results:
        if not isinstance(result, dict) or not isinstance(result.get("flagged"), bool):
            raise ModelAnswerInvalid("results 里有一项没有布尔值 flagged")
        categories = result.get("categories", {})
        if categories is None:
            categories = {}
        if not isinstance(categories, dict):
            raise ModelAnswerInvalid("categories 不是对象")
        if result["flagged"]:
            flagged = True
            if category is None:
                category = next((name for name, hit in categories.items() if hit is True and isinstance(name, str)), None)
    return flagged, category


def guard_chat_answer_text(answer) -> str:
    """The text of a chat-completions answer. Raises ModelAnswerInvalid when it has none."""
    try:
        content = answer["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError) as exc:
        raise ModelAnswerInvalid("回答不是对话补全（choices[0].message.content）") from exc
    if not isinstance(content, str):
        raise ModelAnswerInvalid("回答没有文本")
    return content


def guard_text_read(text: str, *, controversial_flagged: bool) -> tuple[bool, str | None]:
    """Flagged, and the first category, from a guard model's text (Qwen3Guard-Gen:
    "Safety: Unsafe\\nCategories: Violent"); any case, full-width colon, markdown around, a
    reasoning block before it. Raises ModelAnswerInvalid without a Safety line."""
    text = _THINK.sub("", text)
    found = _SAFETY_LINE.search(text)
    if found is None:
        raise ModelAnswerInvalid("回答里没有“Safety: …”一行")
    level = found.group(1).lower()
    flagged = level == "unsafe" or (level == "controversial" and controversial_flagged)
    if not flagged:
        return False, None
    listed = _CATEGORIES_LINE.search(text)
    names = re.split(r"[,，、;；]", listed.group(1)) if listed else []
    category = next((n for n in (name.strip(" \t*_`\"'.。") for name in names) if n.lower() not in _NO_CATEGORY), None)
    return True, category
