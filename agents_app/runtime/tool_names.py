"""The names the model calls tools by (docs/design.md#the-tool-loop), in one place.

- an MCP tool: `<service>__<tool>`;
- a sub-agent: `call_<name>` with `-` → `_`;
- every name lower-case, `[a-z0-9_-]`, at most 64 characters (the model API's limit; a hash
  keeps long names apart), and unique within a turn (`_2`, `_3` … on collision).

The tool adapters name themselves with these rules, the turn's assembly (tools.py) makes the
names unique, and admin shows staff the same names.
"""
import hashlib
import re

NAME_LIMIT = 64
SUB_AGENT_PREFIX = "call_"


def tool_name_normalise(raw: str) -> str:
    """Lower-case, `[a-z0-9_-]` only, at most 64 characters (a hash keeps long names apart)."""
    name = re.sub(r"[^a-z0-9_-]", "_", raw.lower()) or "tool"
    if len(name) > NAME_LIMIT:
        digest = hashlib.sha1(name.encode()).hexdigest()[:8]
        name = f"{name[: NAME_LIMIT - 9]}_{digest}"
    return name


def tool_name_unique(name: str, taken: set[str]) -> str:
    """`name`, or `name_2`, `name_3` … (still ≤ 64) when another tool of the turn has it."""
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        suffix = f"_{n}"
        candidate = name[: NAME_LIMIT - len(suffix)] + suffix
    taken.add(candidate)
    return candidate


def mcp_tool_name(*, service: str, tool: str) -> str:
    return tool_name_normalise(f"{service}__{tool}")


def subagent_tool_name(*, sub_agent: str) -> str:
    # `call_` + a 63-character sub-agent name is 68 characters: normalising keeps it ≤ 64.
    return tool_name_normalise(SUB_AGENT_PREFIX + sub_agent.replace("-", "_"))


def knowledge_tool_name(*, slug: str) -> str:
    """`search_<slug>`, `-` → `_` (docs/design.md#the-knowledge-base)."""
    return tool_name_normalise("search_" + slug.replace("-", "_"))
