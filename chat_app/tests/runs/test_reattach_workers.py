"""Re-attaching to a run on the other worker loses no frame (docs/design.md#runs), with Redis and two
worker processes on the suite's database (PostgreSQL in CI).

The worker that runs a run copies its frames into Redis in batches (runs.redis_bus.RedisMirror,
RUN_MIRROR_BATCH_SEC), after the run's end is stored in the database. A follower on the other
worker that came in that gap found the run ended in the database and answered `done` from the
stored reply at once, without the frames the copy had not reached yet: the end of the text was
lost although `done` came. `test_a_follower_on_b_of_a_run_just_ended_on_a_gets_its_last_frames`
makes the gap wide (a batch a second) so that it always shows; the soak is the traffic that found
it: 80 turns 24 at a time, half of the clients hanging up after 1–6 chunks and re-attaching with
`Last-Event-ID` on the other worker up to half a second later (`SOAK_REPEAT=10` runs it ten
times over).
"""
import asyncio
import json
import os
import random
import time
import uuid

import httpx
import pytest

from testkit.fixtures.workers import worker_sql
from testkit.model.fake_llm import Reply
from testkit.processes import asgi_processes
from testkit.web.sse import read_until, run_events

TEXT = "查询结果如下：本学期的选课通知里没有找到相关信息，您可以稍后再问，或者直接联系教务处。"  # 45 characters


@pytest.fixture
def slow_copy_workers(worker_env):
    """(A, B) whose Redis copy of a run's log lags a second behind the run."""
    with asgi_processes("uvicorn", env={**worker_env, "RUN_MIRROR_BATCH_SEC": "1.0"}, count=2) as pair:
        yield pair


def _token(base_url: str) -> dict:
    answer = httpx.post(f"{base_url}/api/v1/auth/token", json={"username": "20230001", "password": "s3cret-Pass!"})
    assert answer.status_code == 200, answer.text
    return {"Authorization": f"Bearer {answer.json()['access_token']}"}


def _run_status(database_url: str, run_id: str) -> str:
    return worker_sql(database_url, "SELECT status FROM chat_app_run WHERE id = {}", (uuid.UUID(run_id),))[0][0]


def test_a_follower_on_b_of_a_run_just_ended_on_a_gets_its_last_frames(slow_copy_workers, llm_server,
                                                                         worker_database):
    (a_url, _), (b_url, _) = slow_copy_workers
    token = _token(a_url)
    llm_server.queue(Reply(text=TEXT, chunk_size=3, chunk_delay=0.05))  # 15 chunks, ~0.75 s
    with httpx.Client(base_url=a_url, timeout=20) as client:
        with client.stream("POST", "/api/v1/chat", json={"message": "选课通知"}, headers=token) as response:
            blocks, _ = read_until(response, lambda f: f["type"] == "chunk")
    run_id, last_id = blocks[0][1]["run_id"], blocks[-1][0]
    deadline = time.monotonic() + 10
    while _run_status(worker_database, run_id) == "running":  # its end stored; the copy a second behind
        assert time.monotonic() < deadline, "the run never ended"
        time.sleep(0.02)

    rest = run_events(b_url, run_id, headers=token, last_event_id=str(last_id), timeout=20)

    seen = "".join(f["content"] for _, f in blocks if f["type"] == "chunk") + rest.text
    assert rest.frames[-1]["type"] == "done" and seen == rest.frames[-1]["full_text"] == TEXT
    assert rest.ids[1:] == list(range(last_id + 1, last_id + len(rest.frames)))  # none lost, none repeated


# --- the soak -----------------------------------------------------------------------------------
TURNS, AT_ONCE = 80, 24


@pytest.fixture
def soak_workers(worker_env):
    """(A, B) that let one student hold the soak's streams and rate."""
    env = {**worker_env, "CHAT_MAX_CONCURRENT_STREAMS": str(AT_ONCE * 2), "CHAT_RATE_PER_MINUTE": "10000",
           "RUN_MAX_FOLLOWERS_PER_USER": str(AT_ONCE * 2)}
    with asgi_processes("uvicorn", env=env, count=2) as pair:
        yield pair


async def _frames(response: httpx.Response, *, stop_after_chunks: int | None = None):
    """(id, frame) of an SSE answer as they come; with `stop_after_chunks`, until that many chunks."""
    buffer, chunks = "", 0
    async for text in response.aiter_text():
        buffer += text
        while "\n\n" in buffer:
            block, buffer = buffer.split("\n\n", 1)
            if block.startswith(":"):
                continue
            event_id = None
            if block.startswith("id: "):
                head, block = block.split("\n", 1)
                event_id = int(head[4:])
            frame = json.loads(block.removeprefix("data: "))
            yield event_id, frame
            chunks += frame["type"] == "chunk"
            if stop_after_chunks is not None and chunks >= stop_after_chunks:
                return


async def _turn(n: int, urls: tuple[str, str], token: dict, rng: random.Random) -> str | None:
    """One student turn; None when it saw the whole answer, else what went wrong."""
    first, other = urls if n % 2 else urls[::-1]
    hang_up_after = rng.randint(1, 6) if n % 4 < 2 else None  # half of them
    reconnect_after = rng.uniform(0, 0.5)
    seen: list[tuple[int | None, dict]] = []
    async with httpx.AsyncClient(timeout=30) as client:
        async with client.stream("POST", f"{first}/api/v1/chat", json={"message": f"第 {n} 个问题"},
                                 headers=token) as response:
            if response.status_code != 200:
                return f"turn {n}: HTTP {response.status_code}"
            async for block in _frames(response, stop_after_chunks=hang_up_after):
                seen.append(block)
        if hang_up_after is not None and seen[-1][1]["type"] != "done":
            run_id, last = seen[0][1]["run_id"], seen[-1][0]
            await asyncio.sleep(reconnect_after)  # a client takes a moment to come back
            async with client.stream("GET", f"{other}/api/v1/runs/{run_id}/events",
                                     headers={**token, "Last-Event-ID": str(last)}) as response:
                if response.status_code != 200:
                    return f"turn {n}: re-attaching answered HTTP {response.status_code}"
                seen += [block async for block in _frames(response) if block[1]["type"] != "session"]
    ids = [event_id for event_id, _ in seen if event_id is not None]
    text = "".join(f["content"] for _, f in seen if f["type"] == "chunk")
    done = seen[-1][1]
    if done["type"] != "done" or text != done["full_text"] or text != TEXT or ids != list(range(1, len(ids) + 1)):
        return f"turn {n} (hung up after {hang_up_after}): text {text!r}, ids {ids}, last {done['type']}"
    return None


async def _soak(urls: tuple[str, str], token: dict, seed: int) -> list[str]:
    rng, gate = random.Random(seed), asyncio.Semaphore(AT_ONCE)

    async def one(n: int) -> str | None:
        async with gate:
            return await _turn(n, urls, token, rng)

    return [problem for problem in await asyncio.gather(*(one(n) for n in range(TURNS))) if problem]


def test_soak_of_reattaching_on_the_other_worker_loses_nothing(soak_workers, llm_server):
    (a_url, _), (b_url, _) = soak_workers
    llm_server.responder = lambda request: Reply(text=TEXT, chunk_size=3, chunk_delay=0.02)
    token = _token(a_url)
    for repeat in range(int(os.environ.get("SOAK_REPEAT", "1"))):
        problems = asyncio.run(_soak((a_url, b_url), token, seed=repeat))
        assert not problems, f"soak {repeat + 1}: {len(problems)} of {TURNS} turns lost frames: {problems[:3]}"
