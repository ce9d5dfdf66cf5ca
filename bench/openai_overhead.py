"""Benchmark: server CPU per turn of the OpenAI-compatible stream (`POST /v1/chat/completions`,
docs/clients.md) against the chat stream (`POST /api/v1/chat`), in one run.

    .venv/bin/python bench/openai_overhead.py                  # 6 rounds of 20 turns per side
    .venv/bin/python bench/openai_overhead.py --rounds 10 --turns 30
    .venv/bin/python bench/openai_overhead.py --api-key            # the OpenAI side with an API key

The same stack as bench/stream_overhead.py (the scripted model in its own process, one uvicorn
gateway worker on a throw-away SQLite file, this script the clients). Each side asks `--turns`
questions one after the other, both with the same JWT; the rounds alternate between the sides
(A, B, A, B …) so that a busy machine weighs on both alike. The worker's user + system CPU is
read from /proc before and after each round. Goal (issue 22): the OpenAI stream's CPU per turn
≤ 1.1 × the chat stream's.
"""
import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stream_overhead import Stack, gateway_stream  # noqa: E402

GOAL = 1.1


async def openai_stream(http, token: str, question: str) -> tuple[float, float]:
    started, first, buffer = time.perf_counter(), None, ""
    body = {"model": "bench", "stream": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": question}]}
    async with http.stream("POST", "/v1/chat/completions", json=body,
                           headers={"Authorization": f"Bearer {token}"}) as response:
        if response.status_code != 200:
            raise RuntimeError(f"HTTP {response.status_code}: {(await response.aread())[:200]!r}")
        async for text in response.aiter_text():
            buffer += text
            while "\n\n" in buffer:
                block, buffer = buffer.split("\n\n", 1)
                if not block.startswith("data: "):
                    continue
                data = block[len("data: "):]
                if data == "[DONE]":
                    return (first - started) * 1000, (time.perf_counter() - started) * 1000
                chunk = json.loads(data)
                if first is None and chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                    first = time.perf_counter()
    raise RuntimeError("stream ended without [DONE]")


async def run(stack: Stack, *, rounds: int, turns: int, api_key: bool) -> dict:
    import httpx

    sides = {"chat": gateway_stream, "openai": openai_stream}
    cpu = {side: [] for side in sides}
    times = {side: [] for side in sides}
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{stack.gw_port}", timeout=60) as http:
        tokens = {"chat": stack.token, "openai": stack.token}
        if api_key:  # as a real OpenAI client authenticates: checked on its row every request
            made = await http.post("/api/v1/api-keys", json={"name": "bench"},
                                   headers={"Authorization": f"Bearer {stack.token}"})
            tokens["openai"] = made.json()["key"]
        for side, stream in sides.items():  # warm-up: code paths, pools, database pages
            for _ in range(5):
                await stream(http, tokens[side], "热身")
        for r in range(rounds):
            order = list(sides) if r % 2 == 0 else list(reversed(sides))
            for side in order:
                before = stack.cpu_sec()
                for i in range(turns):
                    times[side].append(await sides[side](http, tokens[side], f"问题{r}-{i}"))
                cpu[side].append((stack.cpu_sec() - before) * 1000 / turns)
    return {"cpu": cpu, "times": times}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--pace", type=float, default=0.005, help="seconds between the model's chunks")
    parser.add_argument("--chunks", type=int, default=20)
    parser.add_argument("--api-key", action="store_true",
                        help="the OpenAI side with a personal API key (the chat side keeps the JWT)")
    args = parser.parse_args()
    stack = Stack(pace=args.pace, chunks=args.chunks).start()
    try:
        result = asyncio.run(run(stack, rounds=args.rounds, turns=args.turns, api_key=args.api_key))
    finally:
        stack.stop()
    cpu, times = result["cpu"], result["times"]
    print(f"{args.rounds} rounds × {args.turns} turns per side, {args.chunks} chunks per answer, "
          f"the OpenAI side with {'an API key' if args.api_key else 'the JWT'}")
    for side in cpu:
        ttfc = statistics.median(t[0] for t in times[side])
        total = statistics.median(t[1] for t in times[side])
        rounds = " ".join(f"{c:.1f}" for c in cpu[side])
        print(f"  {side:>6}: CPU per turn median {statistics.median(cpu[side]):5.1f} ms, mean "
              f"{statistics.mean(cpu[side]):5.1f} ms (rounds: {rounds}); TTFC p50 {ttfc:.1f} ms, total p50 {total:.1f} ms")
    if not all(cpu["chat"]):  # the CPU clock ticks every 10 ms: a round of a few turns may see none
        print("  ratio openai / chat: n/a (a round's CPU read 0 ticks: more --turns)")
        return
    ratio = statistics.median(cpu["openai"]) / statistics.median(cpu["chat"])
    pairs = [o / c for o, c in zip(cpu["openai"], cpu["chat"], strict=True)]
    print(f"  ratio openai / chat: {ratio:.2f} (median of rounds; per round {' '.join(f'{p:.2f}' for p in pairs)}); "
          f"goal ≤ {GOAL}: {'met' if ratio <= GOAL else 'missed'}")


if __name__ == "__main__":
    main()
