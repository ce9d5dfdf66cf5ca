"""Runs outlive their request (docs/design.md#runs), on the embedded backend: one worker, no Redis.

Real ASGI app on loopback, scripted model, contract sub-agent. The same cases with two worker
processes and Redis are in test_runs_workers.py.
"""
import threading
import time

import httpx
import pytest

from chat_app.models import Message, Run
from testkit.model.fake_llm import Reply
from testkit.polling import wait_for
from testkit.web.sse import chat, read_rest, read_until, run_events

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.embedded]

SLOW_TEXT = "这是一段需要慢慢说完的回答，" * 4  # 56 characters, 14 chunks of 4


def _run_ended(run_id):
    return lambda: Run.objects.filter(id=run_id).exclude(status__in=Run.ACTIVE).first()


def test_frames_are_numbered_and_the_session_names_the_run(live_asgi, llm_settings, agent, auth_headers, user):
    llm_settings.reply_text("你好，同学。")
    result = chat(live_asgi, {"message": "你好"}, headers=auth_headers)
    session = result.frames[0]
    run = Run.objects.get(id=session["run_id"])
    assert (run.user, str(run.conversation_id), str(run.message_id)) == (
        user, session["conversation_id"], session["message_id"])
    assert run.status == Run.Status.FINISHED and run.ended_at is not None and run.partial_text == ""
    assert run.request_id == result.headers["x-request-id"]
    assert result.ids[0] is None  # `session` carries none
    assert result.ids[1:] == list(range(1, len(result.frames)))


def test_client_leaving_does_not_stop_the_run(live_asgi, llm_settings, agent, auth_headers):
    llm_settings.queue(Reply(text=SLOW_TEXT, chunk_delay=0.05))
    with httpx.Client(base_url=live_asgi, timeout=15) as client:
        with client.stream("POST", "/api/v1/chat", json={"message": "慢慢说"}, headers=auth_headers) as response:
            blocks, _ = read_until(response, lambda f: f["type"] == "chunk")
    run_id = blocks[0][1]["run_id"]  # the client hung up after its first chunk

    run = wait_for(_run_ended(run_id), what="the run to end")
    assert run.status == Run.Status.FINISHED
    reply = Message.objects.get(id=run.message_id)
    assert reply.content == SLOW_TEXT and "interrupted" not in reply.meta


def test_reattach_with_last_event_id_gets_exactly_the_rest(live_asgi, llm_settings, agent, auth_headers):
    llm_settings.queue(Reply(text=SLOW_TEXT, chunk_delay=0.05))
    with httpx.Client(base_url=live_asgi, timeout=15) as client:
        with client.stream("POST", "/api/v1/chat", json={"message": "慢慢说"}, headers=auth_headers) as response:
            blocks, _ = read_until(response, lambda f: f["type"] == "chunk" and len(f["content"]) > 0)
    first_part = [(i, f) for i, f in blocks if i is not None]
    last_id = first_part[-1][0]
    run_id = blocks[0][1]["run_id"]

    rest = run_events(live_asgi, run_id, headers=auth_headers, last_event_id=str(last_id))
    assert rest.status == 200 and rest.headers["content-type"].startswith("text/event-stream")
    assert rest.frames[0]["type"] == "session" and rest.frames[0]["run_id"] == run_id
    assert rest.ids[1:] == list(range(last_id + 1, last_id + len(rest.frames)))  # nothing lost or repeated
    assert rest.frames[-1]["type"] == "done"
    text = "".join(f["content"] for _, f in first_part if f["type"] == "chunk") + rest.text
    assert text == SLOW_TEXT == rest.frames[-1]["full_text"]

    again = run_events(live_asgi, run_id, headers=auth_headers, after=0)  # ?after= replays it all
    assert again.text == SLOW_TEXT and again.ids[1:] == list(range(1, len(again.frames)))

    beyond = run_events(live_asgi, run_id, headers=auth_headers, last_event_id="999999")  # past the end
    assert beyond.types == ["session", "done"] and beyond.frames[-1]["full_text"] == SLOW_TEXT


def test_an_ended_run_whose_log_expired_ends_from_the_stored_reply(
    live_asgi, llm_settings, agent, auth_headers, settings
):
    settings.RUN_LOG_RETAIN_SEC = 0
    llm_settings.reply_text("已经说完的回答。")
    result = chat(live_asgi, {"message": "你好"}, headers=auth_headers)
    run_id = result.frames[0]["run_id"]

    late = run_events(live_asgi, run_id, headers=auth_headers, last_event_id="1")
    assert late.types == ["session", "done"]
    assert late.frames[-1]["full_text"] == "已经说完的回答。"
    assert late.frames[-1]["message_id"] == result.frames[-1]["message_id"]


def test_events_of_another_users_run_are_404_and_bad_cursors_400(
    live_asgi, llm_settings, agent, auth_headers, other_user, token_for
):
    llm_settings.reply_text("好")
    run_id = chat(live_asgi, {"message": "你好"}, headers=auth_headers).frames[0]["run_id"]
    stranger = {"Authorization": f"Bearer {token_for(other_user)}"}
    with httpx.Client(base_url=live_asgi, timeout=10) as client:
        for path in (f"/api/v1/runs/{run_id}/events", "/api/v1/runs/00000000-0000-0000-0000-000000000000/events"):
            answer = client.get(path, headers=stranger)
            assert answer.status_code == 404 and answer.json()["code"] == 40401
        assert client.post(f"/api/v1/runs/{run_id}/stop", headers=stranger).status_code == 404
        assert client.get(f"/api/v1/runs/{run_id}/events").status_code == 401
        for bad in ("-1", "1e3", "abc", "9" * 40, "１".encode()):
            answer = client.get(f"/api/v1/runs/{run_id}/events", headers={**auth_headers, "Last-Event-ID": bad})
            assert answer.status_code == 400 and answer.json()["code"] == 40001, bad
        answer = client.get(f"/api/v1/runs/{run_id}/events?after=x", headers=auth_headers)
        assert answer.status_code == 400
        assert client.post(f"/api/v1/runs/{run_id}/events", headers=auth_headers).status_code == 405
        assert client.get(f"/api/v1/runs/{run_id}/stop", headers=auth_headers).status_code == 405
        finished = client.post(f"/api/v1/runs/{run_id}/stop", headers=auth_headers)
        assert (finished.status_code, finished.json()) == (200, {"status": "finished"})


def test_active_run_id_while_running_and_a_second_follower(live_asgi, llm_settings, agent, auth_headers):
    llm_settings.queue(Reply(text=SLOW_TEXT, chunk_delay=0.05))
    with httpx.Client(base_url=live_asgi, timeout=15) as client:
        with client.stream("POST", "/api/v1/chat", json={"message": "慢慢说"}, headers=auth_headers) as response:
            blocks, _ = read_until(response, lambda f: f["type"] == "chunk")
            session = blocks[0][1]
            detail = client.get(f"/api/v1/conversations/{session['conversation_id']}", headers=auth_headers).json()
            assert detail["active_run_id"] == session["run_id"]
            listed = client.get("/api/v1/conversations", headers=auth_headers).json()["results"][0]
            assert listed["active_run_id"] == session["run_id"]
            second_tab = run_events(live_asgi, session["run_id"], headers=auth_headers, after=0)
            first_tab_raw = read_rest(response)
    assert second_tab.text == SLOW_TEXT and second_tab.frames[-1]["type"] == "done"
    assert '"type":"done"' in first_tab_raw
    detail = httpx.get(f"{live_asgi}/api/v1/conversations/{session['conversation_id']}", headers=auth_headers).json()
    assert detail["active_run_id"] is None


def test_stop_cancels_the_sub_agent_stream_within_a_second(
    live_asgi, llm_settings, agent, auth_headers, subagent_server
):
    llm_settings.reply_tool_calls(("call_canteen", {"message": "[[mode:trickle]] 一直说"}), text="我查一下。")
    with httpx.Client(base_url=live_asgi, timeout=15) as client:
        with client.stream("POST", "/api/v1/chat", json={"message": "食堂"}, headers=auth_headers) as response:
            blocks, _ = read_until(response, lambda f: f["type"] == "tool_chunk")
            run_id = blocks[0][1]["run_id"]
            stopped_at = time.monotonic()
            answer = client.post(f"/api/v1/runs/{run_id}/stop", headers=auth_headers)
            assert (answer.status_code, answer.json()) == (202, {"status": "stopping"})
            assert subagent_server.stream_cut.wait(timeout=5)
            assert time.monotonic() - stopped_at < 1.0
            rest = read_rest(response)
    assert '"type":"done"' in rest and '"interrupted":true' in rest
    run = wait_for(_run_ended(run_id), what="the stopped run to be stored")
    assert run.status == Run.Status.INTERRUPTED
    rows = list(Message.objects.filter(conversation_id=run.conversation_id).order_by("created_at", "seq"))
    assert [r.role for r in rows] == ["user", "assistant", "tool", "assistant"]
    assert rows[1].meta["tool_calls"] and rows[2].meta.get("interrupted") is True  # no call left without a result
    assert rows[3].meta.get("interrupted") is True


def test_stream_slot_counts_running_runs_not_connections(live_asgi, llm_settings, agent, auth_headers, settings):
    settings.CHAT_MAX_CONCURRENT_STREAMS = 1
    llm_settings.queue(Reply(text=SLOW_TEXT, chunk_delay=0.05))
    with httpx.Client(base_url=live_asgi, timeout=15) as client:
        with client.stream("POST", "/api/v1/chat", json={"message": "慢慢说"}, headers=auth_headers) as response:
            read_until(response, lambda f: f["type"] == "chunk")
            refused = chat(live_asgi, {"message": "再问一个"}, headers=auth_headers)  # the first run still runs
            assert refused.status == 429 and refused.body_json["code"] == 42901
            # The slot is free by the time the student is told the answer is done (not when the
            # run's row says it ended: that is stored a moment before the slot is given back).
            assert '"type":"done"' in read_rest(response)
    llm_settings.reply_text("好")
    assert chat(live_asgi, {"message": "再问一个"}, headers=auth_headers).status == 200


def test_stopping_from_another_thread_while_the_page_follows(live_asgi, llm_settings, agent, auth_headers):
    """Stop works without the stopping client's own stream: a second connection sends it."""
    llm_settings.queue(Reply(text=SLOW_TEXT, chunk_delay=0.2))
    got_chunk = threading.Event()
    result = {}

    def follow():
        with httpx.Client(base_url=live_asgi, timeout=15) as client:
            with client.stream("POST", "/api/v1/chat", json={"message": "慢慢说"}, headers=auth_headers) as response:
                blocks, raw = read_until(response, lambda f: f["type"] == "chunk")
                result["run_id"] = blocks[0][1]["run_id"]
                got_chunk.set()
                result["raw"] = raw + read_rest(response)

    follower = threading.Thread(target=follow)
    follower.start()
    assert got_chunk.wait(10)
    assert httpx.post(f"{live_asgi}/api/v1/runs/{result['run_id']}/stop", headers=auth_headers).status_code == 202
    follower.join(10)
    assert '"interrupted":true' in result["raw"]
    reply = Message.objects.get(id=Run.objects.get(id=result["run_id"]).message_id)
    assert reply.meta["interrupted"] is True and SLOW_TEXT.startswith(reply.content) and reply.content


def test_text_deltas_close_together_share_a_frame_paced_ones_do_not(live_asgi, llm_settings, agent, auth_headers):
    burst = "一二三四五六七八九十" * 4
    llm_settings.queue(Reply(text=burst, chunk_size=2))  # 20 deltas as fast as the model can send
    result = chat(live_asgi, {"message": "快说"}, headers=auth_headers)
    assert result.text == burst == result.frames[-1]["full_text"]
    assert 2 <= len(result.of("chunk")) <= 4  # the first at once, the rest coalesced

    llm_settings.queue(Reply(text="慢慢地说", chunk_size=1, chunk_delay=0.15))  # far more than 25 ms apart
    paced = chat(live_asgi, {"message": "慢说"}, headers=auth_headers)
    assert [c["content"] for c in paced.of("chunk")] == list("慢慢地说")


@pytest.mark.parametrize("transport_fixture", ["mcp_service_sse", "mcp_service_http"])
def test_stop_cancels_a_running_mcp_call_within_a_second(
    live_asgi, llm_settings, agent_factory, auth_headers, transport_fixture, request
):
    service = request.getfixturevalue(transport_fixture)
    server = request.getfixturevalue("mcp_sse_server" if service.protocol == "sse" else "mcp_http_server")
    agent_factory(slug="mcp-agent", mcp_services=[service])
    llm_settings.reply_tool_calls((f"{service.name}__slow", {"seconds": 30}))
    with httpx.Client(base_url=live_asgi, timeout=15) as client:
        with client.stream("POST", "/api/v1/chat", json={"message": "慢工具", "agent": "mcp-agent"},
                           headers=auth_headers) as response:
            blocks, _ = read_until(response, lambda f: f["type"] == "tool_call")
            run_id = blocks[0][1]["run_id"]
            # The `tool_call` frame comes before the call reaches the server: stopped before that,
            # the server never sees a call to cancel (CI saw it once, on a busy machine).
            assert server.slow_started.wait(timeout=5), "the MCP server started the call"
            asked = time.monotonic()
            assert client.post(f"/api/v1/runs/{run_id}/stop", headers=auth_headers).status_code == 202
            assert server.slow_cancelled.wait(timeout=5), "the MCP server saw its call cancelled"
            assert time.monotonic() - asked < 1.0
            rest = read_rest(response)
    assert '"interrupted":true' in rest
