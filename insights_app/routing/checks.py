"""Stored checks: run an agent's cases, store the outcome beside the previous check's."""
import time
from dataclasses import dataclass

from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import transaction
from loguru import logger

from agents_app.models import Agent
from insights_app.models import RoutingCase, RoutingCheck, RoutingOutcome
from insights_app.routing.ask import Catalog, routing_catalog
from insights_app.routing.judge import CaseSpec
from insights_app.routing.replay import CaseResult, routing_replay

Change = RoutingOutcome.Change


def routing_cases_enabled(*, agent: Agent) -> list[RoutingCase]:
    return list(RoutingCase.objects.filter(agent=agent, enabled=True).prefetch_related("arg_expectations")
                .order_by("id"))


def outcome_change(*, before: bool | None, now: bool) -> str:
    if before is None:
        return Change.NEW
    if before != now:
        return Change.FIXED if now else Change.REGRESSED
    return Change.STILL_PASSING if now else Change.STILL_FAILING


def routing_check_previous(*, agent: Agent, mode: str) -> RoutingCheck | None:
    """The agent's latest stored check of the same routing mode (model checks are compared with
    model checks: keyword routing is another router)."""
    return RoutingCheck.objects.filter(agent=agent, mode=mode).order_by("-started_at", "-id").first()


@dataclass(frozen=True)
class CheckSettings:
    repeat: int
    pass_rate: float
    mode: str | None  # None: each agent as its chat turns route (routing_catalog)

    @classmethod
    def resolve(cls, *, repeat: int | None = None, pass_rate: float | None = None,
                mode: str | None = None) -> "CheckSettings":
        return cls(
            repeat=max(1, repeat or settings.ROUTING_CHECK_REPEAT),
            pass_rate=settings.ROUTING_CHECK_PASS_RATE if pass_rate is None else pass_rate,
            mode=mode,
        )


async def _replay(agent: Agent, specs: list[CaseSpec], knobs: CheckSettings) -> tuple[Catalog, list[CaseResult]]:
    catalog = await routing_catalog(agent=agent, mode=knobs.mode)
    return catalog, await routing_replay(catalog=catalog, cases=specs, repeat=knobs.repeat, pass_rate=knobs.pass_rate)


@transaction.atomic
def routing_check_store(*, agent: Agent, catalog: Catalog, results: list[CaseResult], knobs: CheckSettings,
                        trigger: str, user=None, duration_ms: int = 0) -> RoutingCheck:
    previous = routing_check_previous(agent=agent, mode=catalog.mode)
    before = {o.case_id: o.passed for o in previous.outcomes.all()} if previous else {}
    check = RoutingCheck.objects.create(
        agent=agent, mode=catalog.mode, model=catalog.model, fingerprint=catalog.fingerprint,
        tools=catalog.tool_names, problems=catalog.problems,
        # keyword routing runs each case once: it always chooses the same way
        repeat=max((len(result.runs) for result in results), default=knobs.repeat), pass_rate=knobs.pass_rate,
        trigger=trigger, created_by=user if user is not None and user.is_authenticated else None,
        previous=previous, duration_ms=duration_ms,
    )
    outcomes = [
        RoutingOutcome(
            check_run=check, case_id=result.case.id, question=result.case.question, runs=len(result.runs),
            passes=result.passes, passed=result.passed,
            change=outcome_change(before=before.get(result.case.id), now=result.passed),
            detail=[run.as_dict() for run in result.runs],
        )
        for result in results
    ]
    RoutingOutcome.objects.bulk_create(outcomes)
    check.total = len(outcomes)
    check.passed = sum(o.passed for o in outcomes)
    check.regressed = sum(o.change == Change.REGRESSED for o in outcomes)
    check.fixed = sum(o.change == Change.FIXED for o in outcomes)
    check.save(update_fields=["total", "passed", "regressed", "fixed"])
    return check


def routing_check_run(*, agent: Agent, knobs: CheckSettings, trigger: str, user=None) -> RoutingCheck | None:
    """Replays the agent's enabled cases now and stores the check (None: the agent has none).
    Sync: call it from a management command or an admin view, not from an event loop."""
    cases = routing_cases_enabled(agent=agent)
    if not cases:
        return None
    started = time.perf_counter()
    catalog, results = async_to_sync(_replay)(agent, [CaseSpec.of(case) for case in cases], knobs)
    duration_ms = int((time.perf_counter() - started) * 1000)
    check = routing_check_store(agent=agent, catalog=catalog, results=results, knobs=knobs, trigger=trigger,
                                user=user, duration_ms=duration_ms)
    logger.info("routing check agent={} mode={} passed={}/{} regressed={} fingerprint={}", agent.slug, check.mode,
                check.passed, check.total, check.regressed, check.fingerprint)
    return check
