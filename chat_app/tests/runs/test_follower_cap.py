"""Issue 20 point 6: one user held 1,000 followers of one run. Now RUN_MAX_FOLLOWERS_PER_USER,
counted in the cache (the local-memory one, and Redis, where every worker shares the count)."""
import json
from contextlib import ExitStack, nullcontext

import httpx
import pytest

from campus_agent.base.errors import MSG_TOO_MANY_FOLLOWERS, TOO_MANY_FOLLOWERS
from testkit.fixtures.base import redis_cache_shared
from testkit.model.fake_llm import Reply
from testkit.polling import wait_for
from testkit.web.sse import read_until

pytestmark = pytest.mark.django_db(transaction=True)


def _follow(stack: ExitStack, base: str, run_id: str, headers: dict) -> httpx.Response:
    client = stack.enter_context(httpx.Client(base_url=base, timeout=15))
    return stack.enter_context(client.stream("GET", f"/api/v1/runs/{run_id}/events", headers=headers))


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_followers_are_capped_per_user_and_given_back(request, live_asgi, llm_settings, agent, auth_headers,
                                                      token_for, other_user, settings, store):
    redis_block = (redis_cache_shared(settings, request.getfixturevalue("redis_url"), key_prefix="chat:followers")
                   if store == "redis" else nullcontext())
    with redis_block, ExitStack() as stack:
        settings.RUN_MAX_FOLLOWERS_PER_USER = 2
        llm_settings.queue(Reply(text="慢慢说，" * 40, chunk_delay=0.1))
        client = stack.enter_context(httpx.Client(base_url=live_asgi, timeout=15))
        asking = stack.enter_context(client.stream("POST", "/api/v1/chat", json={"message": "你好"}, headers=auth_headers))
        blocks, _ = read_until(asking, lambda f: f["type"] == "session")
        run_id = blocks[0][1]["run_id"]

        first = _follow(stack, live_asgi, run_id, auth_headers)
        second = _follow(stack, live_asgi, run_id, auth_headers)
        assert first.status_code == second.status_code == 200
        read_until(first, lambda f: f["type"] == "session")
        read_until(second, lambda f: f["type"] == "session")

        refused = httpx.get(f"{live_asgi}/api/v1/runs/{run_id}/events", headers=auth_headers, timeout=10)
        assert refused.status_code == 429 and refused.headers["Retry-After"]
        assert refused.json() == {"code": TOO_MANY_FOLLOWERS, "message": MSG_TOO_MANY_FOLLOWERS.format(limit=2)}

        # Another user's followers are theirs to count (and they may not follow this run: 404).
        theirs = {"Authorization": f"Bearer {token_for(other_user)}"}
        assert httpx.get(f"{live_asgi}/api/v1/runs/{run_id}/events", headers=theirs, timeout=10).status_code == 404

        first.close()  # the client goes: its lease is given back when the server sees it
        def admitted():
            with httpx.Client(base_url=live_asgi, timeout=15) as c, c.stream(
                    "GET", f"/api/v1/runs/{run_id}/events", headers=auth_headers) as r:
                return r.status_code == 200
        wait_for(admitted, timeout=10, what="a follower's lease given back")


def test_a_follower_that_reads_to_done_gives_its_lease_back(live_asgi, llm_settings, agent, auth_headers, settings):
    settings.RUN_MAX_FOLLOWERS_PER_USER = 1
    llm_settings.reply_text("好的。")
    with httpx.Client(base_url=live_asgi, timeout=15) as client:
        raw = client.post("/api/v1/chat", json={"message": "你好"}, headers=auth_headers).text
        run_id = json.loads(raw.split("data: ", 1)[1].split("\n", 1)[0])["run_id"]
        for _ in range(3):  # one at a time, each to its end: never refused
            assert client.get(f"/api/v1/runs/{run_id}/events", headers=auth_headers).status_code == 200
