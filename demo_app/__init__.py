"""The demo the keyless run serves (scripts/run.sh; docs/demo.md): the demo sub-agents and the
demo A2A agent (served under /demo/subagents/ when DEMO_ENABLED is on), the demo MCP server (stdio),
the catalog that registers them with the default agent (`manage.py load_demo`) and its routing
cases (`manage.py load_demo_cases`). Product code, in one place; no app imports it (only the
project's URLconf and ASGI entry point mount it)."""
