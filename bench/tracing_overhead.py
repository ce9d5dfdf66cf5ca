"""Benchmark: what tracing's hooks cost a turn, off (the default) and on.

    .venv/bin/python bench/tracing_overhead.py            # 20,000 turns each way

A "turn" here is exactly the tracing work a real turn with two parallel tool calls does, and
nothing else: the run's span, two model rounds (each a round generator passed through
`model_round_traced` and read to its end), two tool spans with their outcome, two outbound
header sets (`trace_headers_add`). "off" is the default (no OTEL_* variable); "on" is a
TracerProvider with the request-id stamp and a span processor that drops every span (the export itself runs on the batch
processor's thread in production). The figure is CPU time per turn (process_time), to put
beside the ≈ 30–56 ms of server CPU a whole turn costs (docs/benchmarks.md).
"""
import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "campus_agent.settings")
for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER"):
    os.environ.pop(name, None)

import django  # noqa: E402

django.setup()

from opentelemetry.sdk.trace import SpanProcessor, TracerProvider  # noqa: E402

from agents_app.runtime.context import RunContext  # noqa: E402
from agents_app.runtime.tool import ToolOutcome  # noqa: E402
from agents_app.runtime.tool_runs import ToolRequest  # noqa: E402
from agents_app.runtime.tracing import model_round_traced, run_span, tool_span  # noqa: E402
from campus_agent.base.tracing import (  # noqa: E402
    request_id_span_processor,
    trace_headers_add,
    tracing_start,
    tracing_stop,
)

CTX = RunContext(request_id="0af7651916cd43dd", conversation_id="c0a8e1f2-0000-4000-8000-000000000001")
AGENT = SimpleNamespace(name="校园小智", slug="xiaozhi", effective_model="qwen-plus", temperature=0.3)
TURN = SimpleNamespace(agent=AGENT, ctx=CTX, usage={}, tool_rounds=0, specs=[{}, {}], max_tool_rounds=5)
CALLS = [ToolRequest(call_id=f"call_{i}", tool=name, args={}) for i, name in enumerate(("call_canteen", "x__add"))]
TOOL = SimpleNamespace(trace_kind="mcp")
OUTCOME = ToolOutcome(text="42")


async def _round():
    yield "chunk"


async def one_turn() -> None:
    with run_span(agent=AGENT, ctx=CTX, run_id="r1") as record:
        for _ in range(2):
            async for _ in model_round_traced(TURN, _round()):
                pass
        for request in CALLS:
            with tool_span(request=request, tool=TOOL, ctx=CTX) as span:
                trace_headers_add({"Accept": "text/event-stream"}, request_id=CTX.request_id)
                span.outcome(OUTCOME)
        record.ended(interrupted=False, stopped=False)


async def one_turn_bare() -> None:
    """The same work without any tracing hook: the baseline the hooks add to."""
    for _ in range(2):
        async for _ in _round():
            pass
    for _ in CALLS:
        {"Accept": "text/event-stream", "X-Request-Id": CTX.request_id}  # noqa: B018 - the header dict built anyway


async def measure(turn, n: int) -> float:
    for _ in range(min(n, 500)):  # warm up
        await turn()
    started = time.process_time()
    for _ in range(n):
        await turn()
    return (time.process_time() - started) / n * 1e6  # µs per turn


class _Drop(SpanProcessor):
    pass  # on_start / on_end do nothing: the spans are made and ended, then dropped


async def main(n: int) -> None:
    bare = await measure(one_turn_bare, n)
    off = await measure(one_turn, n)
    provider = TracerProvider()
    provider.add_span_processor(request_id_span_processor())  # as tracing_provider_build does
    provider.add_span_processor(_Drop())
    tracing_start(provider)
    on = await measure(one_turn, n)
    tracing_stop()
    print(f"turns: {n} each; CPU per turn: bare {bare:.2f} µs, tracing off {off:.2f} µs "
          f"(hooks add {off - bare:.2f} µs), tracing on {on:.2f} µs (adds {on - bare:.2f} µs: 5 spans)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=20_000)
    asyncio.run(main(parser.parse_args().n))
