"""The per-user stream limit holds across two workers, each taking a run's lease in its event loop
(the asyncio Redis client, chat_app.runs.lease.RunLease). Workers are uvicorn child processes
sharing Redis and a database."""
import threading

import httpx
import pytest
import redis

from campus_agent.base.errors import TOO_MANY_STREAMS
from testkit.model.fake_llm import Reply
from testkit.processes import asgi_processes
from testkit.web.sse import chat, read_rest, read_until

SLOW_TEXT = "慢慢地说，" * 10


@pytest.fixture
def one_stream_workers(worker_env):
    """Workers A and B (worker_fixtures.py) with one stream per user and the JWT remembered."""
    env = {**worker_env, "CHAT_MAX_CONCURRENT_STREAMS": "1", "AUTH_SESSION_CACHE_SEC": "60"}
    with asgi_processes("uvicorn", env=env, count=2) as ((a, _), (b, _)):
        yield a, b


def test_a_stream_on_a_holds_the_users_only_slot_on_b(one_stream_workers, llm_server, redis_url):
    a, b = one_stream_workers
    token = httpx.post(f"{a}/api/v1/auth/token", json={"username": "20230001", "password": "s3cret-Pass!"}).json()
    headers = {"Authorization": f"Bearer {token['access_token']}"}
    llm_server.reply_text("一。")
    llm_server.reply_text("二。")
    # The first stream on each worker checks the JWT in the database; from then on each admits
    # this caller in its event loop, limits included.
    assert chat(a, {"message": "一"}, headers=headers).status == 200
    assert chat(b, {"message": "二"}, headers=headers).status == 200

    llm_server.queue(Reply(text=SLOW_TEXT, chunk_delay=0.05))
    with httpx.Client(base_url=a, timeout=20) as client:
        with client.stream("POST", "/api/v1/chat", json={"message": "慢慢说"}, headers=headers) as response:
            read_until(response, lambda f: f["type"] == "chunk")
            leases = redis.Redis.from_url(redis_url).keys("*chat:streams:*")
            assert len(leases) == 1  # A's slot, leased in Redis
            refused = httpx.post(f"{b}/api/v1/chat", json={"message": "再问"}, headers=headers)
            assert refused.status_code == 429 and refused.json()["code"] == TOO_MANY_STREAMS
            read_rest(response)
    assert redis.Redis.from_url(redis_url).keys("*chat:streams:*") == []  # given back when the run ended
    llm_server.reply_text("三。")
    assert chat(b, {"message": "三"}, headers=headers).status == 200


def test_the_upload_rate_holds_across_two_workers(worker_env):
    """25 uploads sent at once, half to each worker, against a limit of 20 a minute: 20 accepted.
    Counting the minute's rows and then writing one let both workers accept past it."""
    env = {**worker_env, "UPLOAD_RATE_PER_MINUTE": "20"}
    with asgi_processes("uvicorn", env=env, count=2) as ((a, _), (b, _)):
        token = httpx.post(f"{a}/api/v1/auth/token", json={"username": "20230001", "password": "s3cret-Pass!"}).json()
        headers = {"Authorization": f"Bearer {token['access_token']}"}
        barrier, statuses = threading.Barrier(25), []

        def upload(number: int) -> None:
            with httpx.Client(base_url=(a, b)[number % 2], timeout=20) as client:
                barrier.wait()
                answer = client.post("/api/v1/uploads", headers=headers,
                                     files={"file": (f"{number}.txt", f"第 {number} 份".encode(), "text/plain")})
                statuses.append(answer.status_code)

        threads = [threading.Thread(target=upload, args=(n,)) for n in range(25)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    assert sorted(statuses) == [201] * 20 + [429] * 5
