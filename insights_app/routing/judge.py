"""Judging one run of a case: the tools the model chose on its first round against the case."""
import json
from dataclasses import dataclass, field

from insights_app.models import ANY_TOOL, RoutingCase

MISSING = "没有调用 {tool}"
FORBIDDEN = "调用了不应调用的 {tool}"
NO_TOOL_EXPECTED = "不应调用任何工具，却调用了 {tools}"
ARG_TOOL_NOT_CALLED = "没有调用 {tool}，无法检查参数 {argument}"
ARG_MISMATCH = "{tool} 的参数 {argument} 不含“{contains}”（实际：{actual}）"
REQUEST_FAILED = "请求模型失败：{reason}"
DEADLINE_PASSED = "检查超过 {seconds:g} 秒的总时限，这次没有得到模型的回答。"
MALFORMED_ANSWER = "模型返回的工具调用格式不正确：{reason}"
ACTUAL_PREVIEW = 60


@dataclass(frozen=True, slots=True)
class ArgExpectation:
    tool: str
    argument: str
    contains: str


@dataclass(frozen=True, slots=True)
class CaseSpec:
    """What a replay needs of a case (plain data, read from the database once)."""

    id: int | None
    question: str
    history: tuple[dict, ...] = ()
    must_call: tuple[str, ...] = ()
    must_not_call: tuple[str, ...] = ()
    arguments: tuple[ArgExpectation, ...] = ()

    @classmethod
    def of(cls, case: RoutingCase) -> "CaseSpec":
        """From a case with its `arg_expectations` (prefetch them for many cases)."""
        return cls(
            id=case.pk,
            question=case.question,
            history=tuple(case.history or ()),
            must_call=tuple(case.must_call or ()),
            must_not_call=tuple(case.must_not_call or ()),
            arguments=tuple(
                ArgExpectation(tool=e.tool, argument=e.argument, contains=e.contains)
                for e in case.arg_expectations.all()
            ),
        )

    def messages(self) -> list[dict]:
        """The conversation the model is shown after the system prompt."""
        return [*(dict(m) for m in self.history), {"role": "user", "content": self.question}]


@dataclass(frozen=True, slots=True)
class ToolChoice:
    name: str
    args: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"name": self.name, "args": self.args}


def _text(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _clip(text: str) -> str:
    return text if len(text) <= ACTUAL_PREVIEW else text[:ACTUAL_PREVIEW] + "…"


def run_failures(*, case: CaseSpec, calls: list[ToolChoice]) -> list[str]:
    """What is wrong with the calls of one run (empty: the run passes)."""
    called = [call.name for call in calls]
    failures = [MISSING.format(tool=tool) for tool in case.must_call if tool not in called]
    if ANY_TOOL in case.must_not_call:
        if called:
            failures.append(NO_TOOL_EXPECTED.format(tools="、".join(dict.fromkeys(called))))
    else:
        failures += [FORBIDDEN.format(tool=tool) for tool in case.must_not_call if tool in called]
    for expected in case.arguments:
        values = [call.args.get(expected.argument) for call in calls if call.name == expected.tool]
        if not values:
            failures.append(ARG_TOOL_NOT_CALLED.format(tool=expected.tool, argument=expected.argument))
            continue
        texts = [_text(value) for value in values if value is not None]
        if not any(expected.contains.lower() in text.lower() for text in texts):
            failures.append(ARG_MISMATCH.format(
                tool=expected.tool, argument=expected.argument, contains=expected.contains,
                actual=_clip(" | ".join(texts)) or "（无）",
            ))
    return failures
