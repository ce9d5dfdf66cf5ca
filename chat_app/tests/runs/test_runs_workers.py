"""Runs across two worker processes sharing one Redis and one database (docs/design.md#runs).

Workers A and B are `uvicorn campus_agent.asgi:application` child processes, as a deployment
runs them, with REDIS_URL set; the scripted model and the contract sub-agent are this process's
loopback servers. The database is a file of the test (SQLite), or a database of its own on the
suite's PostgreSQL when the suite runs there. Heartbeats are fast here (0.3 s, stale after
1.5 s) so that a killed worker's run is recovered in a test's time.
"""
import os
import signal
import time
import uuid

import httpx
import pytest

from testkit.fixtures.workers import worker_sql
from testkit.model.fake_llm import Reply
from testkit.web.sse import parse_blocks, read_rest, read_until, run_events

SLOW_TEXT = "两个进程共享同一个运行，" * 6  # 66 characters, 17 chunks of 4


def _ids(blocks) -> list[int]:
    return [event_id for event_id, _ in blocks if event_id is not None]


def test_start_on_a_reattach_on_b_with_last_event_id_gets_exactly_the_rest(workers, token, llm_server):
    (a_url, _), (b_url, _) = workers
    llm_server.queue(Reply(text=SLOW_TEXT, chunk_delay=0.05))
    with httpx.Client(base_url=a_url, timeout=20) as client:
        with client.stream("POST", "/api/v1/chat", json={"message": "慢慢说"}, headers=token) as response:
            blocks, _ = read_until(response, lambda f: f["type"] == "chunk" and len(f["content"]) == 4)
    run_id = blocks[0][1]["run_id"]
    have = _ids(blocks)
    assert have == list(range(1, len(have) + 1))

    rest = run_events(b_url, run_id, headers=token, last_event_id=str(have[-1]), timeout=20)
    assert rest.status == 200 and rest.frames[0] == {**blocks[0][1]}  # the same session, from B
    assert rest.ids[1:] == list(range(have[-1] + 1, have[-1] + len(rest.frames)))  # none lost or repeated
    assert rest.frames[-1]["type"] == "done" and rest.frames[-1]["full_text"] == SLOW_TEXT
    seen = "".join(f["content"] for _, f in blocks if f["type"] == "chunk") + rest.text
    assert seen == SLOW_TEXT


def test_stop_sent_to_b_cancels_the_run_on_a_and_its_sub_agent_stream(workers, token, llm_server, subagent_server):
    (a_url, _), (b_url, _) = workers
    llm_server.reply_tool_calls(("call_canteen", {"message": "[[mode:trickle]] 一直说"}), text="我查一下。")
    with httpx.Client(base_url=a_url, timeout=20) as client:
        with client.stream("POST", "/api/v1/chat", json={"message": "食堂"}, headers=token) as response:
            blocks, _ = read_until(response, lambda f: f["type"] == "tool_chunk")
            run_id = blocks[0][1]["run_id"]
            asked = time.monotonic()
            answer = httpx.post(f"{b_url}/api/v1/runs/{run_id}/stop", headers=token)
            assert (answer.status_code, answer.json()) == (202, {"status": "stopping"})
            assert subagent_server.stream_cut.wait(timeout=5)
            assert time.monotonic() - asked < 1.0, "the sub-agent saw its stream closed within 1 s"
            rest = read_rest(response)
    done = [f for _, f in parse_blocks(rest)[0] if f["type"] == "done"]
    assert done and done[0]["interrupted"] is True
    again = httpx.post(f"{b_url}/api/v1/runs/{run_id}/stop", headers=token)
    assert (again.status_code, again.json()) == (200, {"status": "finished"})


def _wait_for_checkpoint(database_url: str, run_id: str, text: str, timeout: float = 10.0) -> None:
    """Waits until the workers' database holds `text` as the run's checkpoint."""
    query = "SELECT partial_text FROM chat_app_run WHERE id = {}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if worker_sql(database_url, query, (uuid.UUID(run_id),)) == [(text,)]:
            return
        time.sleep(0.05)
    raise AssertionError(f"the run's checkpoint never held {text!r}")


def test_kill_9_of_a_mid_tool_call_b_finishes_the_run_as_interrupted_keeping_finished_tool_rows(
    workers, token, llm_server, worker_database
):
    (a_url, a_proc), (b_url, _) = workers
    llm_server.reply_tool_calls(("call_canteen", {"message": "今天的菜单"}), text="先查菜单。")
    llm_server.reply_tool_calls(("call_canteen", {"message": "[[mode:trickle]] 再查人数"}), text="再查人数。")
    calls: list[str] = []

    def second_call_streaming(frame: dict) -> bool:
        if frame["type"] == "tool_call" and frame["call_id"] not in calls:
            calls.append(frame["call_id"])
        return frame["type"] == "tool_chunk" and calls[1:] == [frame["call_id"]]

    client = httpx.Client(base_url=a_url, timeout=20)
    response = client.send(client.build_request("POST", "/api/v1/chat", json={"message": "食堂怎么样"}, headers=token),
                           stream=True)
    blocks, _ = read_until(response, second_call_streaming)
    session = blocks[0][1]
    # A killed worker loses what it streamed after its last checkpoint (≤ RUN_HEARTBEAT_SEC):
    # kill it once the checkpoint holds the second round's text, so what is kept is known.
    _wait_for_checkpoint(worker_database, session["run_id"], "再查人数。")
    os.kill(a_proc.pid, signal.SIGKILL)  # mid-way through the second tool call
    a_proc.wait(timeout=10)
    with pytest.raises(httpx.TransportError):  # the client sees its connection die with A
        read_rest(response)
    client.close()
    last = _ids(blocks)[-1]

    started = time.monotonic()
    rest = run_events(b_url, session["run_id"], headers=token, last_event_id=str(last), timeout=30)
    assert time.monotonic() - started < 15, "another worker finishes a dead worker's run within 15 s"
    assert rest.frames[-1]["type"] == "done" and rest.frames[-1]["interrupted"] is True

    messages = httpx.get(f"{b_url}/api/v1/conversations/{session['conversation_id']}/messages", headers=token)
    rows = messages.json()["results"]
    assert [r["role"] for r in rows] == ["user", "assistant", "tool", "assistant"]
    calls, tool, reply = rows[1], rows[2], rows[3]
    assert calls["content"] == "先查菜单。" and calls["meta"]["tool_calls"][0]["function"]["name"] == "call_canteen"
    assert tool["meta"]["ok"] is True and "今天的菜单" in tool["content"]  # the finished round is kept
    assert reply["id"] == session["message_id"] and reply["meta"]["interrupted"] is True
    assert reply["content"] == "再查人数。"  # the checkpointed text of the cut round
    detail = httpx.get(f"{b_url}/api/v1/conversations/{session['conversation_id']}", headers=token).json()
    assert detail["active_run_id"] is None

    llm_server.reply_text("还能接着聊。")  # the conversation stays usable
    with httpx.Client(base_url=b_url, timeout=20) as client:
        with client.stream("POST", "/api/v1/chat", headers=token,
                           json={"message": "好的", "conversation_id": session["conversation_id"]}) as response:
            assert "还能接着聊。" in read_rest(response)
    history = llm_server.last_request.messages
    assert [m["role"] for m in history][1:] == ["user", "assistant", "tool", "assistant", "user"]
