"""Routing with an unsaved edit: the agent's cases against the catalog as the change form would
make it, beside the catalog as it is now. Nothing is saved and no tool runs.

An edited agent, sub-agent or MCP service is an in-memory model instance (the admin form's
`instance` after validation); the agents it affects get their catalog set on an unsaved copy
(`enabled_mcp_services` / `enabled_sub_agents`, which the runtime's tools_for_agent reads: see
agents_app.selectors), so the tools are assembled by the runtime's own code.
"""
import asyncio
import json
from dataclasses import dataclass, field

from asgiref.sync import async_to_sync, sync_to_async

from agents_app.models import Agent, McpService
from agents_app.selectors import agent_catalog_load
from insights_app.models import RoutingCheck
from insights_app.routing.ask import KEYWORD, Catalog, routing_catalog
from insights_app.routing.checks import CheckSettings, routing_cases_enabled
from insights_app.routing.judge import CaseSpec
from insights_app.routing.replay import CaseResult, routing_replay
from subagents_app.models import SubAgent

BREAKS, FIXES, SAME = "breaks", "fixes", "same"
KEYWORD_ROUTING_TEXT = "关键词路由"
NO_PROVIDER_TEXT = "（无）"


@dataclass(frozen=True)
class Verdict:
    passes: int
    runs: int
    passed: bool
    failures: tuple[str, ...] = ()
    choices: tuple[str, ...] = ()  # the tools each run chose, e.g. "call_canteen" / "（未调用工具）"

    @classmethod
    def of_result(cls, result: CaseResult) -> "Verdict":
        return cls(passes=result.passes, runs=len(result.runs), passed=result.passed,
                   failures=tuple(result.failures),
                   choices=tuple("、".join(c.name for c in run.calls) or "（未调用工具）" for run in result.runs))

    @classmethod
    def of_detail(cls, *, passes: int, runs: int, passed: bool, detail: list[dict]) -> "Verdict":
        failures = tuple(dict.fromkeys(f for run in detail for f in run.get("failures", [])))
        choices = tuple("、".join(t["name"] for t in run.get("tools", [])) or "（未调用工具）" for run in detail)
        return cls(passes=passes, runs=runs, passed=passed, failures=failures, choices=choices)


@dataclass(frozen=True)
class PreviewRow:
    case: CaseSpec
    before: Verdict
    after: Verdict

    @property
    def change(self) -> str:
        if self.before.passed and not self.after.passed:
            return BREAKS
        if self.after.passed and not self.before.passed:
            return FIXES
        return SAME


@dataclass
class AgentPreview:
    agent: Agent
    mode: str
    rows: list[PreviewRow] = field(default_factory=list)
    before: Catalog | None = None
    after: Catalog | None = None
    reused_check: RoutingCheck | None = None  # "before" read from this stored check

    @property
    def unchanged_catalog(self) -> bool:
        return self.before.fingerprint == self.after.fingerprint

    @property
    def breaks(self) -> list[PreviewRow]:
        return [row for row in self.rows if row.change == BREAKS]

    @property
    def fixes(self) -> list[PreviewRow]:
        return [row for row in self.rows if row.change == FIXES]

    @property
    def tools_added(self) -> list[str]:
        return [n for n in self.after.tool_names if n not in self.before.tool_names]

    @property
    def tools_removed(self) -> list[str]:
        return [n for n in self.before.tool_names if n not in self.after.tool_names]

    @property
    def changes(self) -> list[str]:
        """What the edit changes of what routes the agent's turns, as staff read it ("提示词",
        "模型提供方（A → B）" …): the sentence above the table says these, never "nothing changes"
        after a diff that changes the prompt or the provider."""
        before, after = self.before, self.after
        changed = []
        if before.mode != after.mode:
            changed.append(f"路由方式（{_router(before)} → {_router(after)}）")
        if before.agent.system_prompt != after.agent.system_prompt:
            changed.append("提示词")
        providers = [catalog.link.provider.name if catalog.link else NO_PROVIDER_TEXT for catalog in (before, after)]
        models = [catalog.link.model if catalog.link else "" for catalog in (before, after)]
        if providers[0] != providers[1]:
            changed.append("模型提供方（{} → {}）".format(*providers))
        if models[0] != models[1]:
            changed.append("模型（{} → {}）".format(*(model or NO_PROVIDER_TEXT for model in models)))
        if before.agent.temperature != after.agent.temperature:
            changed.append(f"温度（{before.agent.temperature} → {after.agent.temperature}）")
        if _specs_key(before) != _specs_key(after):
            changed.append("工具")
        return changed


def _specs_key(catalog: Catalog) -> list[str]:
    return sorted(json.dumps(spec, sort_keys=True, ensure_ascii=False) for spec in catalog.specs)


def _router(catalog: Catalog) -> str:
    return KEYWORD_ROUTING_TEXT if catalog.mode == KEYWORD else f"模型 {catalog.model}"


@dataclass(frozen=True)
class PreviewPair:
    saved: Agent  # as stored, catalog loaded
    edited: Agent  # unsaved, catalog set
    cases: list[CaseSpec]


def _by_name(rows) -> list:
    return sorted(rows, key=lambda row: row.name)


def _copy(agent: Agent) -> Agent:
    """A second in-memory instance of the stored agent, to carry an edited catalog."""
    return Agent.objects.get(pk=agent.pk)


def _pair(*, saved: Agent, edited: Agent) -> PreviewPair | None:
    cases = [CaseSpec.of(case) for case in routing_cases_enabled(agent=saved)]
    return PreviewPair(saved=agent_catalog_load(agent=saved), edited=edited, cases=cases) if cases else None


def preview_pairs_agent(*, edited: Agent, mcp_services=None, sub_agents=None) -> list[PreviewPair]:
    """The edited agent (unsaved fields) with the services and sub-agents ticked in the form
    (None: the form does not offer the field, the stored choice stands)."""
    saved = Agent.objects.get(pk=edited.pk)
    stored = agent_catalog_load(agent=_copy(saved))
    edited.enabled_mcp_services = (
        stored.enabled_mcp_services if mcp_services is None else _by_name(s for s in mcp_services if s.enabled)
    )
    edited.enabled_sub_agents = (
        stored.enabled_sub_agents if sub_agents is None else _by_name(s for s in sub_agents if s.enabled)
    )
    edited.enabled_knowledge_collections = stored.enabled_knowledge_collections  # the stored choice stands
    pair = _pair(saved=saved, edited=edited)
    return [pair] if pair else []


def _replace(rows: list, edited) -> list:
    kept = [row for row in rows if row.pk != edited.pk]
    return _by_name([*kept, edited] if edited.enabled else kept)


def preview_pairs_sub_agent(*, edited: SubAgent) -> list[PreviewPair]:
    """Every agent that offers the sub-agent, with the edited one in place of the stored one."""
    pairs = []
    for saved in Agent.objects.filter(sub_agents=edited.pk).order_by("slug"):
        copy = agent_catalog_load(agent=_copy(saved))
        copy.enabled_sub_agents = _replace(copy.enabled_sub_agents, edited)
        if pair := _pair(saved=saved, edited=copy):
            pairs.append(pair)
    return pairs


def preview_pairs_mcp_service(*, edited: McpService) -> list[PreviewPair]:
    pairs = []
    for saved in Agent.objects.filter(mcp_services=edited.pk).order_by("slug"):
        copy = agent_catalog_load(agent=_copy(saved))
        copy.enabled_mcp_services = _replace(copy.enabled_mcp_services, edited)
        if pair := _pair(saved=saved, edited=copy):
            pairs.append(pair)
    return pairs


def _stored_before(*, agent: Agent, catalog: Catalog, cases: list[CaseSpec]) -> tuple[RoutingCheck, dict] | None:
    """The latest stored check made against exactly this catalog and these cases, if any: its
    outcomes stand for "now" without asking the model again."""
    check = RoutingCheck.objects.filter(agent=agent, mode=catalog.mode, fingerprint=catalog.fingerprint).order_by(
        "-started_at", "-id").first()
    if check is None:
        return None
    outcomes = {o.case_id: o for o in check.outcomes.all()}
    if any(case.id not in outcomes or outcomes[case.id].question != case.question for case in cases):
        return None
    return check, {
        case.id: Verdict.of_detail(passes=outcomes[case.id].passes, runs=outcomes[case.id].runs,
                                   passed=outcomes[case.id].passed, detail=outcomes[case.id].detail)
        for case in cases
    }


async def _preview_one(pair: PreviewPair, knobs: CheckSettings) -> AgentPreview:
    before, after = await asyncio.gather(routing_catalog(agent=pair.saved, mode=knobs.mode),
                                         routing_catalog(agent=pair.edited, mode=knobs.mode))
    preview = AgentPreview(agent=pair.saved, mode=after.mode, before=before, after=after)

    async def replay(catalog: Catalog) -> dict[int, Verdict]:
        results = await routing_replay(catalog=catalog, cases=pair.cases, repeat=knobs.repeat,
                                       pass_rate=knobs.pass_rate)
        return {result.case.id: Verdict.of_result(result) for result in results}

    stored = await sync_to_async(_stored_before)(agent=pair.saved, catalog=before, cases=pair.cases)
    if stored is not None:
        preview.reused_check, verdicts_before = stored
    else:
        verdicts_before = await replay(before)
    # Nothing the model reads changed (e.g. only a timeout): the edit cannot change routing.
    verdicts_after = verdicts_before if preview.unchanged_catalog else await replay(after)
    preview.rows = [PreviewRow(case=case, before=verdicts_before[case.id], after=verdicts_after[case.id])
                    for case in pair.cases]
    return preview


async def _preview_all(pairs: list[PreviewPair], knobs: CheckSettings) -> list[AgentPreview]:
    return list(await asyncio.gather(*(_preview_one(pair, knobs) for pair in pairs)))


def routing_preview(*, pairs: list[PreviewPair], knobs: CheckSettings) -> list[AgentPreview]:
    """Sync (admin views): each affected agent's cases before and after the unsaved edit."""
    return async_to_sync(_preview_all)(pairs, knobs) if pairs else []
