"""Scrape-time gauges of the runs (campus_agent.base.metrics): tool calls waiting for a student's
approval, read from the database when /metrics is asked for."""
from campus_agent.base.metrics import scrape_gauge
from chat_app.models import ToolApproval


def _approvals_waiting():
    yield {}, ToolApproval.objects.filter(status=ToolApproval.Status.PENDING).count()


def metrics_register() -> None:
    scrape_gauge("campus_agent_approvals_waiting", "Tool calls waiting for a student's approval", _approvals_waiting)
