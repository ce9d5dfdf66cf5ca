"""Demo sub-agents shipped with the product (issue #6): canteen menus and a course catalogue.

They speak the sub-agent contract (docs/design.md#sub-agents) from bundled JSON data, served by the gateway
itself under /demo/subagents/<name>/, so a fresh install has something to route to. Each answer
is a pure function of the question: the same question always gets the same answer and chart.
"""
