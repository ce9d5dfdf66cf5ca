"""MCP client side: connections (connect.py), the per-process session pool (pool.py), the tool
lists cache (tool_cache.py), what servers send besides answers (notifications.py), and the tool
call (tools.py) with its result conversion (results.py). See docs/runtime.md."""
