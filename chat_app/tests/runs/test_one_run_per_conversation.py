"""One run per conversation at a time (docs/design.md#runs, docs/security.md#one-run-per-conversation):
a question to a conversation whose run has not ended answers 409 40905 before anything is stored,
on every gateway (REST, `/v1`, MCP, A2A) and across workers; the stored conversation alternates
question and answer. The whole project on loopback, the official clients where there are some."""
import asyncio
import threading
import uuid

import httpx
import httpx2
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import Message as A2aMessage
from a2a.types import Part, Role, SendMessageRequest, TaskState
from a2a.utils.constants import TransportProtocol
from django.db import IntegrityError, transaction
from django.utils import timezone
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from chat_app.accounts.api_keys import api_key_create
from chat_app.models import Conversation, Message, Run
from testkit.fixtures.workers import worker_sql
from testkit.model.fake_llm import Reply
from testkit.web.sse import chat, parse_blocks, read_rest, read_until

BUSY = 40905


def _roles(conversation_id) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in Message.objects.filter(conversation_id=conversation_id).order_by("created_at", "seq")]


async def _mcp_ask(base: str, key: str, arguments: dict):
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(20)) as http:
        async with streamable_http_client(f"{base}/mcp", http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await session.call_tool("ask_xiaozhi", arguments)


async def _a2a_send(base: str, key: str, text: str, context_id: str):
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=20) as http:
        card = await A2ACardResolver(http, base).get_agent_card()
        client = ClientFactory(ClientConfig(httpx_client=http, streaming=False,
                                            supported_protocol_bindings=[TransportProtocol.JSONRPC])).create(card)
        message = A2aMessage(role=Role.ROLE_USER, message_id=uuid.uuid4().hex, context_id=context_id,
                             parts=[Part(text=text)])
        return [event async for event in client.send_message(SendMessageRequest(message=message))]


@pytest.mark.django_db(transaction=True)
def test_a_question_while_the_conversation_answers_is_refused_on_every_gateway(
    live_asgi, llm_settings, agent, user, auth_headers
):
    key = api_key_create(user=user, name="客户端")[1]
    release = threading.Event()
    llm_settings.reply_text("第一个回答，写得很慢。", hold_after_chunks=2, release=release)
    with httpx.Client(base_url=live_asgi, timeout=20) as client:
        with client.stream("POST", "/api/v1/chat", json={"message": "问题一"}, headers=auth_headers) as response:
            blocks, _ = read_until(response, lambda f: f["type"] == "chunk")
            cid = blocks[0][1]["conversation_id"]

            rest = client.post("/api/v1/chat", json={"message": "问题二", "conversation_id": cid}, headers=auth_headers)
            assert (rest.status_code, rest.json()["code"]) == (409, BUSY)
            assert rest.json()["message"].startswith("这个对话上一轮还没有结束")

            v1 = client.post("/v1/chat/completions", headers={"Authorization": f"Bearer {key}"},
                             json={"model": "xiaozhi", "stream": True, "conversation_id": cid,
                                   "messages": [{"role": "user", "content": "问题三"}]})
            assert v1.status_code == 409 and v1.json()["error"]["code"] == "conversation_busy"

            tool = asyncio.run(_mcp_ask(live_asgi, key, {"message": "问题四", "conversation_id": cid}))
            assert tool.is_error and tool.content[0].text.startswith("这个对话上一轮还没有结束")

            (event,) = asyncio.run(_a2a_send(live_asgi, key, "问题五", cid))
            assert event.task.status.state == TaskState.TASK_STATE_REJECTED
            assert event.task.metadata["code"] == BUSY

            assert Run.objects.filter(conversation_id=cid).count() == 1  # nothing else started or stored
            assert _roles(cid) == [("user", "问题一")]
            release.set()
            end, _ = parse_blocks(read_rest(response))
    assert end[-1][1]["type"] == "done" and not end[-1][1].get("interrupted")
    llm_settings.reply_text("第二个回答。")
    after = chat(live_asgi, {"message": "问题二", "conversation_id": cid}, headers=auth_headers)
    assert after.status == 200 and after.text == "第二个回答。"
    assert _roles(cid) == [("user", "问题一"), ("assistant", "第一个回答，写得很慢。"),
                           ("user", "问题二"), ("assistant", "第二个回答。")]


@pytest.mark.django_db
def test_the_database_keeps_one_active_run_per_conversation(user, agent):
    conversation = Conversation.objects.create(user=user, agent=agent, title="t")

    def started(status=Run.Status.RUNNING):
        return Run.objects.create(conversation=conversation, user=user, status=status, heartbeat_at=timezone.now())

    first = started()
    for status in (Run.Status.RUNNING, Run.Status.WAITING):
        with pytest.raises(IntegrityError), transaction.atomic():
            started(status)
    Run.objects.filter(id=first.id).update(status=Run.Status.FINISHED)
    started(Run.Status.WAITING)  # once the first has ended
    started(Run.Status.INTERRUPTED)  # ended runs are not counted


def _asked_at_once(urls: dict, token: dict, release: threading.Event, body_for) -> dict:
    """Each worker asked at the same moment; the model holds the admitted answer until both have
    their answer's status (a refusal, or a stream once admitted), so the two turns overlap
    whoever wins. {name: (status, body)}."""
    barrier, answered, answers = threading.Barrier(len(urls)), threading.Barrier(len(urls), action=release.set), {}

    def ask(name, url):
        barrier.wait()
        with httpx.Client(timeout=20) as client:
            with client.stream("POST", f"{url}/api/v1/chat", headers=token, json=body_for(name)) as response:
                answered.wait()
                answers[name] = (response.status_code, response.read().decode())

    threads = [threading.Thread(target=ask, args=item) for item in urls.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return answers


def test_two_questions_at_once_on_two_workers_start_one_run(workers, worker_env, token, llm_server):
    """Both workers read the conversation as idle at the same moment; the database lets one start."""
    (a_url, _), (b_url, _) = workers
    llm_server.reply_text("好的。")
    first = httpx.post(f"{a_url}/api/v1/chat", json={"message": "开个头"}, headers=token, timeout=20)
    cid = parse_blocks(first.text)[0][0][1]["conversation_id"]
    for round_ in range(4):
        release = threading.Event()
        llm_server.queue(Reply(text=f"回答{round_}", hold_after_chunks=2, release=release))  # one run is admitted
        answers = _asked_at_once({"A": a_url, "B": b_url}, token, release,
                                 lambda name, round_=round_: {"message": f"问题{round_}{name}", "conversation_id": cid})
        assert sorted(status for status, _ in answers.values()) == [200, 409], answers
        refused = next(body for status, body in answers.values() if status == 409)
        assert '"code":40905' in refused.replace(" ", "")
    roles = [role for (role,) in worker_sql(worker_env["DATABASE_URL"],
                                            "SELECT role FROM chat_app_message WHERE conversation_id = {} "
                                            "ORDER BY created_at, seq", (uuid.UUID(cid),))]
    assert roles == ["user", "assistant"] * 5


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("delete", ["all", "one"])
def test_deleting_conversations_ends_their_runs_and_frees_the_slot(
    live_asgi, llm_settings, agent, auth_headers, settings, delete
):
    settings.CHAT_MAX_CONCURRENT_STREAMS = 1
    # An answer that streams on for half a minute: only a stop ends it sooner.
    llm_settings.queue(Reply(text="一个删掉对话也停不下来的回答。" * 40, chunk_delay=0.1))
    with httpx.Client(base_url=live_asgi, timeout=20) as client:
        with client.stream("POST", "/api/v1/chat", json={"message": "问题"}, headers=auth_headers) as response:
            blocks, _ = read_until(response, lambda f: f["type"] == "chunk")
            session = blocks[0][1]
            path = "/api/v1/me/conversations" if delete == "all" else f"/api/v1/conversations/{session['conversation_id']}"
            deleted = client.delete(path, headers=auth_headers)
            assert deleted.status_code in (200, 204), deleted.text
            llm_settings.reply_text("新的回答。")
            fresh = chat(live_asgi, {"message": "再问一个"}, headers=auth_headers)  # the slot was given back
            assert (fresh.status, fresh.text) == (200, "新的回答。")
            end, _ = parse_blocks(read_rest(response))  # the run ended: its followers got their end
    assert end[-1][1]["type"] == "done" and end[-1][1]["interrupted"] is True
    assert Run.objects.get().conversation_id != uuid.UUID(session["conversation_id"])  # only the new one
