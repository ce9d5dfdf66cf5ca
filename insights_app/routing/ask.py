"""What an agent would choose on a case's first round, asked exactly as a chat turn asks.

The catalog is assembled by the runtime's own functions (tools_for_agent, tool_spec: the same
names, descriptions and schemas a turn offers), the model is asked through the runtime's client
(llm_stream: same endpoint, max_tokens, headers) and its streamed calls are merged as the tool
loop merges them (model_calls). Only the first round is read: no tool
runs, so a check has no side effect and sends nothing to sub-agents. Keyword routing is judged
with the fallback's own matcher (tool_match, tool_fallback_args).

Which of the two routes an agent is decided as its chat turns decide it: by the runtime's
provider chain (provider_chain: the Provider chosen in admin, else the LLM_* settings, then the
fallbacks; run_turn routes by keyword when it is empty), never by the settings alone.
"""
import hashlib
import json
import uuid
from dataclasses import dataclass

from agents_app.access import STAFF_VIEW
from agents_app.models import Agent
from agents_app.runtime.fallback import tool_fallback_args, tool_match
from agents_app.runtime.llm import llm_stream
from agents_app.runtime.model_calls import ModelCall, model_call_merge, model_calls_finish
from agents_app.runtime.providers import ChainLink, provider_chain
from agents_app.runtime.tool import Tool, tool_spec
from agents_app.runtime.tools import tools_for_agent
from insights_app.models import RoutingCheck
from insights_app.routing.judge import CaseSpec, ToolChoice

MODEL = RoutingCheck.Mode.MODEL
KEYWORD = RoutingCheck.Mode.KEYWORD
NO_MODEL_TEXT = "“{agent}”没有可用的模型（没有选模型提供方且 LLM_BASE_URL 为空，或提供方都已停用），只能检查关键词路由。"


class RoutingUnavailable(Exception):
    """The check cannot run at all (model mode asked for an agent that has no model)."""


class MalformedAnswer(Exception):
    """The model's tool calls could not be read (fields of the wrong type, …)."""


@dataclass
class Catalog:
    """What one agent offers, as a turn would see it now (or as an unsaved edit would)."""

    agent: Agent
    mode: str
    model: str
    tools: list[Tool]
    specs: list[dict]
    problems: list[str]
    fingerprint: str
    link: ChainLink | None = None  # the first provider its turns would ask (None: it has none)

    @property
    def tool_names(self) -> list[str]:
        return [tool.name for tool in self.tools]


def _fingerprint(*, mode: str, agent: Agent, link: ChainLink | None, specs: list[dict]) -> str:
    shown = {"mode": mode, "tools": sorted(specs, key=lambda spec: spec["function"]["name"])}
    if mode == MODEL:  # keyword routing reads neither the prompt nor the model
        shown |= {"model": link.model, "provider": [link.provider.name, link.provider.base_url],
                  "prompt": agent.system_prompt, "temperature": agent.temperature}
    raw = json.dumps(shown, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


async def routing_catalog(*, agent: Agent, mode: str | None = None) -> Catalog:
    """The agent's tools (MCP lists over one-off sessions, as the admin lists them) and the
    fingerprint of what decides routing. `agent` may be unsaved, with its catalog set on it
    (`enabled_mcp_services`, `enabled_sub_agents`: see agents_app.selectors). `mode` None routes
    as its turns do: the model when its provider chain has one, else keywords; MODEL for an
    agent without one raises RoutingUnavailable."""
    chain = await provider_chain(agent)
    if mode == MODEL and not chain:
        raise RoutingUnavailable(NO_MODEL_TEXT.format(agent=agent.name))
    mode = mode or (MODEL if chain else KEYWORD)
    problems: list[str] = []
    tools = await tools_for_agent(agent, audience=STAFF_VIEW, pooled=False, problems=problems)
    specs = [tool_spec(tool) for tool in tools]
    link = chain[0] if chain else None
    model = link.model if mode == MODEL else ""
    return Catalog(agent=agent, mode=mode, model=model, tools=tools, specs=specs, problems=problems,
                   fingerprint=_fingerprint(mode=mode, agent=agent, link=link, specs=specs), link=link)


async def first_choice_model(*, catalog: Catalog, case: CaseSpec) -> list[ToolChoice]:
    """The tool calls of the model's first answer to the case (raises the client's errors)."""
    agent = catalog.agent
    messages = [{"role": "system", "content": agent.system_prompt}] if agent.system_prompt else []
    messages += case.messages()
    stream = await llm_stream(model=catalog.model, messages=messages, tools=catalog.specs or None,
                              temperature=agent.temperature, request_id=uuid.uuid4().hex[:16],
                              provider=catalog.link.provider if catalog.link else None)
    fragments: dict[int, ModelCall] = {}
    try:
        async for chunk in stream:  # plain dicts, any field may be missing (see LlmStream)
            for choice in chunk.get("choices") or ():
                delta = choice.get("delta") if isinstance(choice, dict) else None
                for fragment in (delta.get("tool_calls") or ()) if isinstance(delta, dict) else ():
                    if isinstance(fragment, dict):
                        _merge(fragments, fragment)
    finally:
        await stream.close()
    try:
        return [ToolChoice(name=str(call.name), args=call.args) for call in model_calls_finish(fragments)]
    except (TypeError, ValueError, AttributeError) as exc:
        raise MalformedAnswer(f"{type(exc).__name__}: {exc}") from exc


def _merge(fragments: dict, fragment: dict) -> None:
    try:
        model_call_merge(fragments, fragment)
    except (TypeError, ValueError, AttributeError) as exc:  # an index that is a list, a name that is an object …
        raise MalformedAnswer(f"{type(exc).__name__}: {exc}") from exc


def first_choice_keyword(*, catalog: Catalog, case: CaseSpec) -> list[ToolChoice]:
    """The call keyword routing would make (fallback_turn's choice), or none."""
    question = case.question
    usable = [tool for tool in catalog.tools if tool_fallback_args(tool=tool, question=question) is not None]
    match = tool_match(question=question, tools=usable)
    if match is None:
        return []
    args = tool_fallback_args(tool=match.tool, question=question, keywords=match.keywords)
    return [ToolChoice(name=match.tool.name, args=args)]  # what keyword routing really sends
