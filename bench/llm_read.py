"""Benchmark: the CPU of opening and reading one model stream through the model client's HTTP,
the SDK's default httpx2 client (before) against its aiohttp client (now,
agents_app/runtime/model_transport.py), side by side in one run (issue 46, step 2).

    .venv/bin/python bench/llm_read.py [--chunks 32] [--pace 0.005] [--concurrency 1,32] [--rounds 3]

The scripted model (testkit.model.fake_llm, as bench/stream_overhead.py serves it) runs in a child
process, so its CPU is not this process's; it sends `--chunks` chunks `--pace` seconds apart, so
each arrives in its own socket read as a real model's do. Each client reads the same streams through
`llm_stream` (the SDK opens the request, the reader parses the events), `--concurrency` streams at
once, the two clients alternating in each round; this process's CPU per stream is printed, median
of the rounds, with the ratio now / before.
"""
import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "campus_agent.settings")
os.environ.setdefault("LOG_LEVEL", "WARNING")

from stream_overhead import _free_port, _wait_port  # noqa: E402  (bench/ is the script's directory)


def _clients():
    import openai

    from agents_app.runtime.model_transport import model_http_client

    return {
        "httpx2 (before)": lambda timeout: openai.DefaultAsyncHttpxClient(timeout=timeout),
        "aiohttp (now)": model_http_client,
    }


async def _one() -> int:
    from agents_app.runtime.llm import llm_stream

    stream = await llm_stream(model="fake-model", messages=[{"role": "user", "content": "今天食堂吃什么？"}],
                              tools=None, temperature=0.3, request_id="0123456789abcdef")
    chunks = 0
    try:
        async for _ in stream:
            chunks += 1
    finally:
        await stream.close()
    return chunks


async def _cpu_per_stream(make_client, concurrency: int, batches: int) -> float:
    from agents_app.runtime import llm

    llm.model_http_client = make_client  # the client llm_client() builds for this loop
    llm._clients.pop(asyncio.get_running_loop(), None)
    for _ in range(2):  # warm-up: the client, its connections
        await asyncio.gather(*(_one() for _ in range(concurrency)))
    start = time.process_time()
    for _ in range(batches):
        await asyncio.gather(*(_one() for _ in range(concurrency)))
    cpu = (time.process_time() - start) / (batches * concurrency) * 1000
    client = llm._clients.pop(asyncio.get_running_loop())["default"][1]
    await client.close()
    return cpu


async def _measure(args) -> None:
    from agents_app.runtime import llm

    clients = _clients()
    levels = [int(x) for x in args.concurrency.split(",")]
    samples = {(name, level): [] for name in clients for level in levels}
    for round_ in range(args.rounds):
        order = list(clients) if round_ % 2 == 0 else list(reversed(clients))
        for level in levels:
            batches = max(1, args.streams // level)
            for name in order:
                samples[name, level].append(await _cpu_per_stream(clients[name], level, batches))
    llm.model_http_client = clients["aiohttp (now)"]
    print(f"CPU per model stream (open + read {args.chunks} chunks {args.pace * 1000:g} ms apart), ms, "
          f"median of {args.rounds} rounds")
    names = list(clients)
    print(f"{'at once':>7}  " + "  ".join(f"{name:>16}" for name in names) + "   now / before")
    for level in levels:
        before, now = (statistics.median(samples[name, level]) for name in names)
        print(f"{level:>7}  {before:>16.2f}  {now:>16.2f}   {now / before:.2f}×")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=32)
    parser.add_argument("--pace", type=float, default=0.005, help="seconds between the model's chunks")
    parser.add_argument("--concurrency", default="1,32", help="streams at once, comma-separated")
    parser.add_argument("--streams", type=int, default=64, help="streams per client, level and round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    port = _free_port()
    model = subprocess.Popen([sys.executable, str(ROOT / "bench" / "stream_overhead.py"), "--serve-llm", str(port),
                              "--pace", str(args.pace), "--chunks", str(args.chunks)], cwd=ROOT)
    try:
        _wait_port(port)
        os.environ.update(LLM_BASE_URL=f"http://127.0.0.1:{port}/v1", LLM_API_KEY="bench", LLM_MODEL="fake-model")
        import django

        django.setup()
        asyncio.run(_measure(args))
    finally:
        model.terminate()
        model.wait()


if __name__ == "__main__":
    main()
