"""Routes of the demo sub-agents, mounted by campus_agent.urls under /demo/subagents/."""
from django.urls import path

from demo_app.subagents.views import demo_subagent_chat, demo_subagent_health

urlpatterns = [
    path("<slug:name>/api/v1/chat", demo_subagent_chat, name="demo-subagent-chat"),
    path("<slug:name>/healthz", demo_subagent_health, name="demo-subagent-health"),
]
