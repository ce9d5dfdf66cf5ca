"""Replaying cases against a catalog: N runs per case, a pass rate, nothing executed."""
import asyncio
from dataclasses import dataclass, field

from django.conf import settings
from loguru import logger

from campus_agent.base.redaction import clip_text
from insights_app.routing.ask import KEYWORD, Catalog, MalformedAnswer, first_choice_keyword, first_choice_model
from insights_app.routing.judge import (
    DEADLINE_PASSED,
    MALFORMED_ANSWER,
    REQUEST_FAILED,
    CaseSpec,
    ToolChoice,
    run_failures,
)

# A rate is a share of runs; the float of 2/3 must not fall short of a 0.66 written in .env.
RATE_EPSILON = 1e-9


@dataclass
class RunResult:
    calls: list[ToolChoice] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    error: str = ""

    @property
    def passed(self) -> bool:
        return not self.failures

    def as_dict(self) -> dict:
        return {"tools": [call.as_dict() for call in self.calls], "failures": self.failures, "error": self.error}


@dataclass
class CaseResult:
    case: CaseSpec
    runs: list[RunResult]
    pass_rate: float

    @property
    def passes(self) -> int:
        return sum(run.passed for run in self.runs)

    @property
    def passed(self) -> bool:
        return bool(self.runs) and self.passes / len(self.runs) + RATE_EPSILON >= self.pass_rate

    @property
    def failures(self) -> list[str]:
        """Each distinct reason a run failed, most frequent first."""
        counted: dict[str, int] = {}
        for run in self.runs:
            for failure in run.failures:
                counted[failure] = counted.get(failure, 0) + 1
        return sorted(counted, key=lambda failure: -counted[failure])


def passes_needed(*, repeat: int, pass_rate: float) -> int:
    """How many of `repeat` runs must pass: what staff read next to the rate."""
    return next(n for n in range(repeat + 1) if n / repeat + RATE_EPSILON >= pass_rate) if repeat else 0


async def _run_model(catalog: Catalog, case: CaseSpec, limit: asyncio.Semaphore, deadline: float) -> RunResult:
    try:
        async with asyncio.timeout_at(deadline):  # the whole check's, waiting for a turn included
            async with limit:
                calls = await first_choice_model(catalog=catalog, case=case)
    except TimeoutError:
        seconds = settings.ROUTING_CHECK_DEADLINE_SEC
        logger.warning("routing check: no answer within the check's {}s deadline", seconds)
        return RunResult(failures=[DEADLINE_PASSED.format(seconds=seconds)], error="deadline")
    except MalformedAnswer as exc:
        logger.warning("routing check: malformed answer: {}", clip_text(str(exc), 200))
        return RunResult(failures=[MALFORMED_ANSWER.format(reason=clip_text(str(exc), 200))], error=str(exc))
    except Exception as exc:  # noqa: BLE001 - one failed request is one failed run, not a failed check
        reason = f"{type(exc).__name__}: {exc}"
        logger.warning("routing check: model request failed: {}", clip_text(reason, 200))
        failure = REQUEST_FAILED.format(reason=clip_text(reason, 200))
        return RunResult(failures=[failure], error=reason)
    return RunResult(calls=calls, failures=run_failures(case=case, calls=calls))


async def routing_replay(
    *, catalog: Catalog, cases: list[CaseSpec], repeat: int, pass_rate: float
) -> list[CaseResult]:
    """Each case `repeat` times against the model (at most ROUTING_CHECK_CONCURRENCY requests at
    once, all within ROUTING_CHECK_DEADLINE_SEC), or once with keyword routing, which always
    chooses the same way."""
    if catalog.mode == KEYWORD:
        results = []
        for case in cases:
            calls = first_choice_keyword(catalog=catalog, case=case)
            results.append(CaseResult(case=case, runs=[RunResult(calls=calls, failures=run_failures(
                case=case, calls=calls))], pass_rate=pass_rate))
        return results
    limit = asyncio.Semaphore(max(1, settings.ROUTING_CHECK_CONCURRENCY))
    deadline = asyncio.get_running_loop().time() + settings.ROUTING_CHECK_DEADLINE_SEC
    per_case = await asyncio.gather(
        *(asyncio.gather(*(_run_model(catalog, case, limit, deadline) for _ in range(repeat))) for case in cases)
    )
    return [CaseResult(case=case, runs=list(runs), pass_rate=pass_rate) for case, runs in zip(cases, per_case,
                                                                                              strict=True)]
