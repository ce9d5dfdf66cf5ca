"""Benchmark: where one turn's time goes inside the gateway worker, from the request's arrival to
its `done` frame (issue 46: what the first chunk and the end add over calling the model directly).

    .venv/bin/python bench/turn_timeline.py                    # 60 turns, one after another, SQLite
    .venv/bin/python bench/turn_timeline.py --database-url postgres://postgres@127.0.0.1:5432/campus_bench

bench/stream_overhead.py's stack (the scripted model, one uvicorn worker, a throw-away database),
the worker started with bench/_timeline.py, which wraps the functions a turn passes through (the
product's code unchanged) and notes when each is reached. Turns alternate with direct streams
from the same client, one at a time. Prints each mark's median instant from the request's
arrival in the worker, the step from the mark before it, and what the client saw: the first
chunk and the end (`done`), the gateway's against the direct client's.
"""
import argparse
import asyncio
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.stream_overhead import Stack, direct_stream, gateway_stream  # noqa: E402

WARM_UP = 5
# bench/_timeline.py's marks: one a turn did not reach (a wrapped function renamed or gone) is named.
MARKS = ("arrived", "admission asked", "admission on its thread", "admission committed", "admitted",
         "model request sent", "model's headers read", "model's first event read", "response headers sent",
         "session frame sent", "first text frame sent", "model's [DONE] read", "storing asked",
         "storing on its thread", "storing committed", "stored", "done frame sent")


async def _turns(stack: Stack, runs: int) -> tuple[list, list]:
    import httpx
    import openai

    direct = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{stack.llm_port}/v1", api_key="sk", max_retries=0)
    gateway = httpx.AsyncClient(base_url=f"http://127.0.0.1:{stack.gw_ports[0]}", timeout=60)
    direct_times, gateway_times = [], []
    try:
        for i in range(WARM_UP + runs):
            d = await direct_stream(direct, f"问题{i}")
            g = await gateway_stream(gateway, stack.token, f"问题{i}")
            if i >= WARM_UP:
                direct_times.append(d)
                gateway_times.append(g)
    finally:
        await gateway.aclose()
        await direct.close()
    return direct_times, gateway_times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=60, help="turns measured (after 5 to warm up)")
    parser.add_argument("--chunks", type=int, default=32)
    parser.add_argument("--pace", type=float, default=0.01, help="seconds between the model's chunks")
    parser.add_argument("--database-url", default="", help="a throw-away PostgreSQL database (default: SQLite)")
    args = parser.parse_args()

    path = Path(tempfile.mkdtemp(prefix="bench-timeline-")) / "turns.jsonl"
    # The worker loads bench/_timeline.py from this tree before uvicorn imports the application.
    stack = Stack(pace=args.pace, chunks=args.chunks, database_url=args.database_url,
                  extra_env={"BENCH_TIMELINE": str(path)}).start()
    try:
        direct, gateway = asyncio.run(_turns(stack, args.runs))
    finally:
        stack.stop()
    turns = [json.loads(line) for line in path.read_text().splitlines()][WARM_UP:]
    names = [name for name in turns[-1] if all(name in turn for turn in turns)]
    medians = {name: statistics.median(turn[name] for turn in turns) for name in names}

    db = "PostgreSQL" if args.database_url.startswith("postgres") else "SQLite"
    print(f"\nOne turn at a time ({len(turns)} turns, {db}, {args.chunks} chunks × {args.pace * 1000:.0f} ms): "
          "median ms from the request's arrival in the worker")
    header = f"{'mark':<32} {'at':>8} {'step':>7}"
    print(header)
    print("-" * len(header))
    before = 0.0
    for name, at in sorted(medians.items(), key=lambda item: item[1]):
        print(f"{name:<32} {at:8.2f} {at - before:7.2f}")
        before = at
    print("marks not reached in every turn: " + (", ".join(name for name in MARKS if name not in medians) or "none"))
    # The slowest first chunks, each with the step that took longest past its median: a periodic
    # stall shows as the same step every few turns.
    order = sorted(medians, key=medians.get)
    steps = {name: (before, name) for before, name in zip(order, order[1:], strict=False)}
    median_step = {name: medians[name] - medians[before] for name, (before, _) in steps.items()}
    slowest = sorted(range(len(turns)), key=lambda i: -turns[i]["first text frame sent"])[:4]
    print("slowest first text frames (turn: ms; the step furthest past its median, ms over it):")
    for i in slowest:
        turn = turns[i]
        late = max(steps, key=lambda name: turn[name] - turn[steps[name][0]] - median_step[name])
        over = turn[late] - turn[steps[late][0]] - median_step[late]
        print(f"  #{i}: {turn['first text frame sent']:.1f}; {steps[late][0]} → {late} +{over:.1f}")
    for label, index in (("first chunk", 0), ("end (done)", 1)):
        ours, theirs = (statistics.median(t[index] for t in times) for times in (gateway, direct))
        print(f"client's {label}: gateway {ours:.1f} ms, direct {theirs:.1f} ms, added {ours - theirs:.1f} ms (p50)")


if __name__ == "__main__":
    main()
