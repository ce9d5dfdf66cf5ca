"""McpService rows kept in memory (no database), for what runs outside the suite's database: the
conformance client and bench/mcp_pool.py.

A row carries what a saved one has (`pk`, `created_at`, `updated_at`): the runtime keys a
service's tool cache and circuit breaker on them (agents_app.mcp.tools.mcp_circuit_key: the
creation time keeps a deleted row's breaker from reaching a new row that reuses the id), so a row
built by hand without them fails on its first call.
"""

from django.utils import timezone

from agents_app.models import McpService


def mcp_service_in_memory(*, name: str, protocol: str, config: dict, timeout_sec: int = 30, **fields) -> McpService:
    now = timezone.now()
    return McpService(
        pk=1, name=name, protocol=protocol, config=config, timeout_sec=timeout_sec, created_at=now, updated_at=now,
        **fields,
    )
