"""A save in admin applies to the next turn: drop what this process cached for the service.

Here: MCP tool lists (per service, in agents_app.mcp.tool_cache). Agents, their tool
selections, providers and sub-agents are kept per worker too, but a database trigger tells every
worker when they changed (agents_app.catalog_cache), so a save has nothing to drop for them.
Other worker processes do not get this signal: they notice the new
`updated_at` in the service's fingerprint instead (agents_app.mcp.connect). A rollback from the
admin history (campus_agent.base.history) is a plain save too: it goes through these receivers.
"""
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from agents_app.models import McpService


@receiver(post_save, sender=McpService, dispatch_uid="mcp_service_saved")
@receiver(post_delete, sender=McpService, dispatch_uid="mcp_service_deleted")
def mcp_service_changed(sender, instance: McpService, **kwargs) -> None:
    from agents_app.mcp.tool_cache import mcp_tools_cache_drop

    mcp_tools_cache_drop(service_id=instance.pk)
