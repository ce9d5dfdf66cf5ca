"""What the page says about the tools: chip labels and the welcome built from the enabled catalog.

Tool frames name tools as the model sees them (`call_canteen`, `campus-calendar__academic_calendar`,
docs/design.md#the-tool-loop); students should read the names staff gave them (issue 13). The welcome lists only
what the selected agent can actually use, so it never promises a service the catalog lacks, nor one
the student's groups may not use (agents_app.access).
"""
import re

from django.utils.translation import gettext_lazy as _

from agents_app.access import STAFF_VIEW, Audience, tools_for
from agents_app.models import Agent, McpService
from agents_app.runtime.tool_names import subagent_tool_name, tool_name_normalise
from campus_agent.base.redaction import clip_text
from subagents_app.models import SubAgent

EXAMPLES_PER_SUB_AGENT = 2
EXAMPLES_MAX = 6
SUMMARY_MAX = 40
_SENTENCE_END = re.compile(r"[。！？!?\n]")
_HEAD_SEPARATOR = re.compile(r"[：:]")
# The product's name, which the demo agent (demo_app/catalog.py) bears too. An agent named so is
# shown by the product's name in the student's language, as the page's brand is: an English page
# said both "Campus Assistant" and 校园小智 (issue 42). Other names are staff's and shown as they are.
BRAND_NAME = "校园小智"
BRAND = _("校园小智")


def agent_display_name(name: str) -> str:
    return str(BRAND) if name == BRAND_NAME else name


def sub_agent_summary(sub_agent: SubAgent) -> str:
    """The first sentence of the description without its "食堂助手（演示）：" head."""
    first = _SENTENCE_END.split((sub_agent.description or "").strip(), maxsplit=1)[0]
    parts = _HEAD_SEPARATOR.split(first, maxsplit=1)
    return clip_text(parts[-1].strip(), SUMMARY_MAX)


def tool_labels(*, audience: Audience) -> dict:
    """`{"names": {tool name: label}, "prefixes": [[tool-name prefix, label]]}`: sub-agents by
    their exact tool name, MCP services by the `<service>__` prefix of their tools' names — those
    `audience` may use (the page names no service a student's groups may not use)."""
    names = {subagent_tool_name(sub_agent=sub.name): sub.label
             for sub in SubAgent.objects.prefetch_related("allowed_groups") if audience.may_use(sub)}
    prefixes = [
        [tool_name_normalise(f"{service.name}__"), service.label]
        for service in McpService.objects.prefetch_related("allowed_groups") if audience.may_use(service)
    ]
    prefixes.sort(key=lambda pair: -len(pair[0]))  # the longest prefix wins
    return {"names": names, "prefixes": prefixes}


def turn_tool_labels() -> dict:
    """tool_labels for the frames of a caller's own turn (the inbound protocols' progress): that
    turn was given only the tools its caller may use, so no label needs leaving out here."""
    return tool_labels(audience=STAFF_VIEW)


def _agent_catalog(agent: Agent, audience: Audience) -> dict:
    services, sub_agents = tools_for(agent=agent, audience=audience)
    examples: list[str] = []
    for sub in sub_agents:
        examples += sub.example_question_list[:EXAMPLES_PER_SUB_AGENT]
    return {
        "name": agent_display_name(agent.name),
        "services": [{"label": s.label, "summary": sub_agent_summary(s)} for s in sub_agents]
        + [{"label": s.label, "summary": ""} for s in services],
        "examples": examples[:EXAMPLES_MAX],
    }


def agent_catalogs(*, agents: list[Agent], audience: Audience) -> dict[str, dict]:
    """slug → {"name", "services": [{"label", "summary"}], "examples": [question]} for `agents`
    (agents_app.access.agents_for's), each listing only what `audience` may use."""
    return {agent.slug: _agent_catalog(agent, audience) for agent in agents}
