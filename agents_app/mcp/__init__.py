"""MCP client side: connections (connect.py), the per-process session pool (pool.py), the tool
lists cache and the MCP tool adapter (tools.py). See docs/runtime.md."""
