"""The per-process cache of each service's tool list (`tools/list`), keyed by the service's
fingerprint: a save in admin (signals.py), a change the server announces
(`notifications/tools/list_changed`, notifications.py) or another worker's save (a new
`updated_at`) makes the next turn list the tools again."""
from __future__ import annotations

import threading
from dataclasses import dataclass

from agents_app.mcp.connect import mcp_service_fingerprint
from agents_app.models import McpService


@dataclass(frozen=True, slots=True)
class McpToolInfo:
    """A tool as the server lists it. `title`: its human-readable name (`title`, else the
    annotations' `title`), the display name when staff gave the service none."""

    name: str
    description: str
    input_schema: dict | None
    title: str | None = None
    # The tool's own hints (annotations readOnlyHint / destructiveHint); only a trusted service's
    # decide its approval policy (McpService.tool_approval).
    read_only: bool | None = None
    destructive: bool | None = None


class McpToolList(list):
    """A service's tools as kept (McpToolInfo), and `dropped`: for staff, a line per tool left
    out for a cap on what a server may list (tools.py `_list_all`)."""

    dropped: tuple[str, ...] = ()


# service id -> (fingerprint, tools). Plain data, so any loop or thread may read it.
_tool_lists: dict[int, tuple[str, McpToolList]] = {}
_tool_lists_lock = threading.Lock()
# service id -> how many times its list was dropped: a listing that was under way when the server
# announced a change (or staff saved the service) must not store the list it got from before.
_generations: dict[int, int] = {}
_cleared = 0


def mcp_tools_cache_drop(*, service_id: int | None = None) -> None:
    """Forgets the cached tool list of a service (all services when None)."""
    global _cleared
    with _tool_lists_lock:
        if service_id is None:
            _tool_lists.clear()
            _cleared += 1
        else:
            _tool_lists.pop(service_id, None)
            _generations[service_id] = _generations.get(service_id, 0) + 1


def mcp_tools_generation(service_id: int) -> tuple[int, int]:
    """Take it before listing and hand it to mcp_tools_remember (see `_generations`)."""
    return _cleared, _generations.get(service_id, 0)


def mcp_tools_cached(service: McpService) -> McpToolList | None:
    """The service's cached tool list, unless the service changed since it was listed."""
    entry = _tool_lists.get(service.pk)
    if entry and entry[0] == mcp_service_fingerprint(service):
        return entry[1]
    return None


def mcp_tools_remember(service: McpService, infos: McpToolList, *,
                       generation: tuple[int, int] | None = None) -> None:
    """Caches the list, unless it was dropped since `generation` was taken (the list is stale)."""
    with _tool_lists_lock:
        if generation is not None and generation != (_cleared, _generations.get(service.pk, 0)):
            return
        _tool_lists[service.pk] = (mcp_service_fingerprint(service), infos)
