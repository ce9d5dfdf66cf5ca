"""The gateway's ASGI application with an event-loop lag probe, for bench/knowledge_indexing.py:
`uvicorn bench._loop_lag:application` serves campus_agent.asgi as it is, and `GET /__bench/loop-lag`
answers the lags measured since the previous call (JSON: [when, milliseconds] each, `when` on
time.perf_counter(), the system's monotonic clock every process shares), then forgets them.

The probe is a task on the worker's own loop that sleeps TICK and notes how late it woke: the
time a callback waited for the loop, which is what a stream's next chunk waits when something
holds the loop (or the GIL the loop needs). It starts at the first call."""
import asyncio
import json
import time

from campus_agent.asgi import application as served

TICK = 0.005
PATH = "/__bench/loop-lag"

_lags: list[tuple[float, float]] = []
_probe: asyncio.Task | None = None


async def _sample() -> None:
    while True:
        asked = time.perf_counter()
        await asyncio.sleep(TICK)
        woke = time.perf_counter()
        _lags.append((asked, max(0.0, (woke - asked - TICK) * 1000)))


async def application(scope, receive, send):
    global _probe
    if scope["type"] != "http" or scope["path"] != PATH:
        await served(scope, receive, send)
        return
    if _probe is None:
        _probe = asyncio.get_running_loop().create_task(_sample())
    body = json.dumps(_lags).encode()
    _lags.clear()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})
