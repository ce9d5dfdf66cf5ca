"""Benchmark: an MCP tool call through the pooled session vs a new stdio session per call.

    .venv/bin/python bench/mcp_pool.py [-n 30]

Calls `add` on the stdio test server (testkit.mcp.servers) N times each way and
prints the median latencies side by side with the ratio. Goal: pooled ≥ 40× faster.
"""
import argparse
import asyncio
import os
import statistics
import sys
import time
from contextlib import AsyncExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "campus_agent.settings")
os.environ.setdefault("LOG_LEVEL", "WARNING")

import django

django.setup()

from agents_app.mcp.connect import mcp_client_enter
from agents_app.mcp.pool import mcp_pool_close
from agents_app.mcp.tools import McpToolInfo
from agents_app.models import McpService
from agents_app.runtime.context import RunContext
from agents_app.runtime.mcp_tool import McpTool
from testkit.mcp.rows import mcp_service_in_memory
from testkit.mcp.servers import stdio_argv

CTX = RunContext(request_id="bench00000000000", conversation_id="bench")


def service() -> McpService:
    argv = stdio_argv()
    return mcp_service_in_memory(name="bench", protocol="stdio",
                                 config={"command": argv[0], "args": argv[1:], "cwd": str(ROOT)})


async def pooled(n: int) -> list[float]:
    tool = McpTool(service=service(), info=McpToolInfo(name="add", description="", input_schema=None))

    async def emit(_text: str) -> None:
        return None

    await tool.run({"a": 0, "b": 0}, CTX, emit)  # the one session start, not measured
    times = []
    for i in range(n):
        started = time.perf_counter()
        outcome = await tool.run({"a": i, "b": 1}, CTX, emit)
        times.append(time.perf_counter() - started)
        assert outcome.ok and outcome.text == str(i + 1), outcome
    await mcp_pool_close()
    return times


async def fresh(n: int) -> list[float]:
    svc = service()
    times = []
    for i in range(n):
        started = time.perf_counter()
        async with AsyncExitStack() as stack:
            client = await mcp_client_enter(service=svc, stack=stack)
            result = await client.call_tool("add", {"a": i, "b": 1})
        times.append(time.perf_counter() - started)
        assert result.content[0].text == str(i + 1)
    return times


async def main(n: int) -> None:
    pooled_times = await pooled(n)
    fresh_times = await fresh(n)
    p, f = statistics.median(pooled_times), statistics.median(fresh_times)
    print(f"MCP stdio tool call, median of {n} calls")
    print(f"{'pooled session':<24}{'new session per call':<24}{'ratio':>8}")
    print(f"{p * 1000:>10.2f} ms{'':<11}{f * 1000:>10.2f} ms{'':<11}{f / p:>7.0f}×")
    print("goal ≥ 40×:", "met" if f / p >= 40 else "NOT met")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=30, help="calls per variant (default 30)")
    asyncio.run(main(parser.parse_args().n))
