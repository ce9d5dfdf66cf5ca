from django.apps import AppConfig


class SubagentsAppConfig(AppConfig):
    name = "subagents_app"
    verbose_name = "子 Agent"
