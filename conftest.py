"""Root conftest: registers each app's fixture modules (the test servers live beside them)."""

pytest_plugins = [
    "campus_agent.testing.fixtures",
]
