"""Approval across workers (docs/design.md#runs, issue 12): a run that paused on worker A is approved on
worker B, or after A was killed, on a worker started since; the pause lives in the database and
the run's frames in Redis, so nothing is lost and the numbering goes on. Fixtures: worker_fixtures.py."""
import os
import signal
import time
import uuid

import httpx

from testkit.fixtures.workers import worker_sql
from testkit.processes import asgi_process
from testkit.web.sse import parse_blocks, read_rest, read_until, run_events


def _ask_first(database_url) -> None:
    worker_sql(database_url, "UPDATE subagents_app_subagent SET approval_policy = {}", ("ask",))


def _status(database_url, run_id) -> str:
    [(status,)] = worker_sql(database_url, "SELECT status FROM chat_app_run WHERE id = {}", (uuid.UUID(run_id),))
    return status


def _paused_on(url, token, llm_server, question="订午饭"):
    llm_server.reply_tool_calls(("call_canteen", {"message": "订一份午饭"}), text="需要确认。")
    llm_server.reply_text("已经订好了。")
    client = httpx.Client(base_url=url, timeout=20)
    response = client.send(client.build_request("POST", "/api/v1/chat", json={"message": question}, headers=token),
                           stream=True)
    blocks, raw = read_until(response, lambda f: f["type"] == "approval_required")
    return client, response, blocks, raw


def test_paused_on_a_approved_on_b_goes_on_in_as_stream(workers, worker_database, token, llm_server, subagent_server):
    (a_url, _), (b_url, _) = workers
    _ask_first(worker_database)
    client, response, blocks, raw = _paused_on(a_url, token, llm_server)
    session, asked = blocks[0][1], blocks[-1][1]
    assert subagent_server.requests == []

    answer = httpx.post(f"{b_url}/api/v1/runs/{session['run_id']}/approvals", headers=token,
                        json={"call_id": asked["call_id"], "decision": "approve"})
    assert answer.json() == {"call_id": asked["call_id"], "status": "approved", "resumed": True}
    rest = read_rest(response)  # A's client: the run now goes on on B, its frames through Redis
    client.close()
    later, _ = parse_blocks(raw[raw.rfind("\n\n") + 2:] + rest)
    assert [f["type"] for _, f in later][-1] == "done" and later[-1][1]["full_text"] == "需要确认。已经订好了。"
    ids = [i for i, _ in blocks + later if i is not None]
    assert ids == list(range(1, len(ids) + 1))  # one numbering across the two workers
    assert len(subagent_server.requests) == 1

    replay = run_events(b_url, session["run_id"], headers=token, after=0)  # the whole run, from Redis
    assert replay.types.count("approval_required") == 1 and replay.frames[-1]["type"] == "done"


def test_approved_after_the_worker_that_paused_it_was_killed(
    workers, worker_env, worker_database, token, llm_server, subagent_server
):
    (a_url, a_proc), _ = workers
    _ask_first(worker_database)
    client, response, blocks, _ = _paused_on(a_url, token, llm_server)
    session, asked = blocks[0][1], blocks[-1][1]
    os.kill(a_proc.pid, signal.SIGKILL)
    a_proc.wait(timeout=10)
    response.close()
    client.close()

    with asgi_process("uvicorn", env=worker_env) as (c_url, _):  # a worker started since
        # A waiting run belongs to no worker: the reapers leave it alone however long it waits.
        deadline = time.monotonic() + 3.0  # 2 × RUN_STALE_SEC, several reaper passes of B and C
        while time.monotonic() < deadline:
            assert _status(worker_database, session["run_id"]) == "waiting"
        answer = httpx.post(f"{c_url}/api/v1/runs/{session['run_id']}/approvals", headers=token,
                            json={"call_id": asked["call_id"], "decision": "approve"})
        assert answer.json()["resumed"] is True
        last = max(i for i, _ in blocks if i is not None)
        rest = run_events(c_url, session["run_id"], headers=token, last_event_id=str(last), timeout=20)
    assert rest.ids[1] == last + 1 and rest.frames[-1]["type"] == "done"
    assert rest.frames[-1]["full_text"] == "需要确认。已经订好了。" and "interrupted" not in rest.frames[-1]
    assert len(subagent_server.requests) == 1
