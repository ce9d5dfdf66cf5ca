"""The breaker is shared by workers: two processes, one Redis (the cache with REDIS_URL set).

The other worker is a child process (`manage.py shell` with REDIS_URL, as a deployment runs each
worker) that calls the sub-agent through the runtime's own tool; this process then sees the
breaker it opened. Redis database 15 by default (the `redis_url` fixture); only the breaker's
keys are removed before and after.
"""
import time

import pytest
from asgiref.sync import sync_to_async

from agents_app.runtime.context import RunContext
from agents_app.runtime.subagent_tool import CIRCUIT_OPEN_TEXT, SubAgentTool
from campus_agent.base.circuit import KEY_PREFIX, CircuitState, circuit_status
from testkit.fixtures.base import redis_cache_shared
from testkit.processes import manage, project_env

pytestmark = pytest.mark.django_db(transaction=True)

CTX = RunContext(request_id="ab12cd34ef567890", conversation_id="conv-redis", campus_token=None)

# Run in the other worker: the sub-agent row rebuilt from its values (that worker's own database
# does not have it; the breaker's key is made from them), called three times, the outcomes printed.
OTHER_WORKER = """
import asyncio, datetime
from agents_app.runtime.context import RunContext
from agents_app.runtime.subagent_tool import SubAgentTool
from subagents_app.models import SubAgent
row = SubAgent(pk={pk}, name="canteen", description="食堂", base_url="{url}", domain="canteen", timeout_sec=3,
               created_at=datetime.datetime.fromisoformat("{created}"))
tool = SubAgentTool(sub_agent=row)
async def main():
    for _ in range({calls}):
        outcome = await tool.run({{"message": "吃啥"}}, RunContext(request_id="r" * 16, conversation_id="c", campus_token=None), None)
        print("OUTCOME", outcome.ok, outcome.error)
asyncio.run(main())
"""


@pytest.fixture
def shared_cache(settings, redis_url):
    with redis_cache_shared(settings, redis_url, key_prefix=KEY_PREFIX):
        yield


def _other_worker(tmp_path, redis_url, sub_agent, *, calls: int) -> list[str]:
    env = project_env(tmp_path, DATABASE_URL=f"sqlite:///{tmp_path / 'other.sqlite3'}", REDIS_URL=redis_url)
    code = OTHER_WORKER.format(pk=sub_agent.pk, url=sub_agent.base_url, created=sub_agent.created_at.isoformat(),
                               calls=calls)
    done = manage("shell", "-c", code, env=env)
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if line.startswith("OUTCOME")]


async def test_a_breaker_opened_by_one_worker_refuses_at_the_other_and_a_probe_here_closes_it_there(
    tmp_path, shared_cache, redis_url, sub_agent_factory, subagent_server, settings
):
    subagent_server.default_mode = "http500"
    row = await sync_to_async(sub_agent_factory)()
    outcomes = await sync_to_async(_other_worker)(tmp_path, redis_url, row, calls=3)
    assert len(outcomes) == 3 and all(o.startswith("OUTCOME False") for o in outcomes)
    assert len(subagent_server.requests) == 3

    tool = SubAgentTool(sub_agent=row)  # this worker
    started = time.perf_counter()
    outcome = await tool.run({"message": "吃啥"}, CTX, None)
    assert outcome.error == CIRCUIT_OPEN_TEXT and time.perf_counter() - started < 0.5
    assert len(subagent_server.requests) == 3

    settings.CIRCUIT_COOLDOWN_SEC = 0  # here only: this worker's call is the probe
    subagent_server.default_mode = "normal"
    assert (await tool.run({"message": "吃啥"}, CTX, None)).ok
    assert (await sync_to_async(circuit_status)(source=tool.circuit_key)).state is CircuitState.CLOSED
    [there] = await sync_to_async(_other_worker)(tmp_path, redis_url, row, calls=1)
    assert there == "OUTCOME True None"  # closed for the other worker too
