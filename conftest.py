"""Root conftest: registers each app's fixture modules (the test servers live beside them)."""

pytest_plugins = [
    "campus_agent.testing.suite_settings",
    "campus_agent.testing.fixtures",
    "subagents_app.testing.fixtures",
    "agents_app.testing.fixtures",
    "chat_app.tests.browser_fixtures",
]
