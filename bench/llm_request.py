"""Benchmark: the CPU of opening and reading one model stream, the messages and tools handed to the
openai SDK as typed arguments (as llm_stream did before) against `extra_body` (as it does now).

    .venv/bin/python bench/llm_request.py [-n 500] [--messages 11,41] [--tools 6]

The model is a loopback server in a child process (so its CPU is not this process's) answering
every request with the same 8-chunk event stream at once. For each history length, both ways are
timed in turns (`-n` requests each, 5 rounds, alternating) and the medians of this process's CPU per
request are printed side by side with their ratio.
"""
import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from contextlib import AsyncExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "campus_agent.settings")
os.environ.setdefault("LOG_LEVEL", "WARNING")

_CHUNK = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
          "choices": [{"index": 0, "delta": {"content": "好"}, "finish_reason": None}]}
_USAGE = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [],
          "usage": {"prompt_tokens": 5, "completion_tokens": 8, "total_tokens": 13}}
_BODY = ("".join(f"data: {json.dumps(_CHUNK)}\n\n" for _ in range(8))
         + f"data: {json.dumps(_USAGE)}\n\ndata: [DONE]\n\n").encode()


async def _serve(port: int) -> None:
    """The model: HTTP/1.1 keep-alive, every request answered with _BODY."""

    async def handle(reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                await reader.readexactly(length)
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                             b"transfer-encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(_BODY), _BODY))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


def _history(n: int) -> list[dict]:
    messages = [{"role": "system", "content": "你是校园小智。" * 50}]
    for i in range(n - 1):
        if i % 4 == 2:
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": f"call_{i}", "type": "function", "function": {"name": "call_canteen", "arguments": '{"q": "菜单"}'}}]})
        elif i % 4 == 3:
            messages.append({"role": "tool", "tool_call_id": f"call_{i - 1}", "content": "红烧肉、番茄炒蛋" * 5})
        else:
            messages.append({"role": "user" if i % 4 == 0 else "assistant", "content": "今天食堂吃什么？" * 10})
    return messages


def _tools(n: int) -> list[dict]:
    return [{"type": "function", "function": {
        "name": f"call_{i}", "description": "食堂助手：菜单、人数" * 5,
        "parameters": {"type": "object", "properties": {"q": {"type": "string", "description": "问题"},
                                                        "day": {"type": "string", "enum": ["今天", "明天"]}},
                       "required": ["q"]}}} for i in range(n)]


async def _typed(*, model, messages, tools, temperature, request_id, **_):
    """The request as llm_stream made it before: every field a typed argument of create()."""
    from django.conf import settings

    from agents_app.runtime import llm

    exits = AsyncExitStack()
    response = await exits.enter_async_context(llm.llm_client().chat.completions.with_streaming_response.create(
        model=model, messages=messages, temperature=temperature, max_tokens=settings.LLM_MAX_TOKENS, stream=True,
        stream_options={"include_usage": True}, extra_headers={llm.HEADER: request_id},
        tools=tools, tool_choice="auto"))
    return llm.LlmStream(response=response, exits=exits)


async def _one(open_stream, messages, tools) -> None:
    stream = await open_stream(model="m", messages=messages, tools=tools, temperature=0.7,
                               request_id="0123456789abcdef")
    try:
        async for _ in stream:
            pass
    finally:
        await stream.close()


async def _measure(n: int, histories: list[int], tool_count: int) -> None:
    from agents_app.runtime import llm

    llm.READ_GAP_SEC = 0.0  # the read pacing waits, it does not spend: out of a CPU figure
    ways = {"typed arguments (before)": _typed, "extra_body (now)": llm.llm_stream}
    tools = _tools(tool_count)
    print(f"CPU per model request (open + read 8 chunks), ms, median of 5 rounds × {n}; {tool_count} tools")
    print(f"{'messages':>8}  " + "  ".join(f"{name:>24}" for name in ways) + "   ratio")
    for count in histories:
        messages = _history(count)
        for way in ways.values():  # warm-up: the client, the connection, the SDK's caches
            for _ in range(20):
                await _one(way, messages, tools)
        samples = {name: [] for name in ways}
        for _ in range(5):
            for name, way in ways.items():
                start = time.process_time()
                for _ in range(n):
                    await _one(way, messages, tools)
                samples[name].append((time.process_time() - start) / n * 1000)
        medians = [statistics.median(samples[name]) for name in ways]
        print(f"{count:>8}  " + "  ".join(f"{m:>24.2f}" for m in medians) + f"   {medians[1] / medians[0]:.2f}×")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=300)
    parser.add_argument("--messages", default="1,11,41", help="history lengths, comma-separated")
    parser.add_argument("--tools", type=int, default=6)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(_serve(args.serve))
        return
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    model = subprocess.Popen([sys.executable, __file__, "--serve", str(port)], stdout=subprocess.PIPE, text=True)
    try:
        assert model.stdout.readline().strip() == "ready"
        os.environ.update(LLM_BASE_URL=f"http://127.0.0.1:{port}/v1", LLM_API_KEY="bench", LLM_MODEL="m")
        import django

        django.setup()
        asyncio.run(_measure(args.n, [int(x) for x in args.messages.split(",")], args.tools))
    finally:
        model.terminate()
        model.wait()


if __name__ == "__main__":
    main()
