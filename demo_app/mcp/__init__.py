"""A demo MCP server shipped with the product (issue #6): campus time and academic calendar.

Run over stdio with `python -m demo_app.mcp`; `manage.py load_demo` registers it as the
MCP service `campus-calendar`. It imports neither Django nor the project settings, because a
stdio server runs with a minimal environment (docs/design.md#cross-cutting-rules).
"""
DEMO_MCP_NAME = "campus-calendar"
DEMO_MCP_MODULE = "demo_app.mcp"
DEMO_MCP_MODULE_BEFORE = "agents_app.demo_mcp"  # its name before it moved here: older demo catalogs start it so
# Pins "now" (ISO 8601, e.g. 2026-11-30T12:00:00+08:00) for tests and recorded demos.
NOW_ENV = "CAMPUS_DEMO_NOW"
