"""The A2A sub-agent client: one `call_<name>` tool call is one A2A message send.

    reply = await a2a_call(sub_agent=..., message=..., request_id=..., conversation_id=...,
                           campus_token=..., on_chunk=emit)          # a SubAgentReply (client.py)

Steps, all within the sub-agent's `timeout_sec`:

1. read the Agent Card (`{base_url}/.well-known/agent-card.json`, cached a minute: a2a_card.py);
2. send the message with a2a-sdk's client, streaming when the card says it can (else a plain
   send); each status text and artifact text update is passed to `on_chunk` as it arrives;
3. end at the task's first terminal or interrupted state: `completed` answers with the artifact
   text; `failed` / `rejected` / `canceled` are the contract's error-event text; `input-required` and
   `auth-required` end the call with a result that tells the model what the agent wants, and an
   `input-required` reply carries the question (`SubAgentReply.asks`: its text, the task and
   context ids), which a turn puts to the student; their answer is sent as the next message of
   the same task (`goes_on`), or, when they do not answer, the task is cancelled
   (`a2a_task_cancel`).

Failures give the seed contract's failure texts (docs/design.md#sub-agents) (client.py's, not copies): a timeout, a connection
failure (a garbled or cut stream included), an HTTP status, an error from the agent. When the
call is abandoned after the agent created a task (a stop cancels the tool's asyncio task; the
deadline passes), the task is cancelled on the agent with `tasks/cancel`, in the background.

The campus token goes as the Bearer credential only when the card declares HTTP bearer auth.
"""
from __future__ import annotations

import asyncio
import time
import uuid
from contextlib import aclosing
from dataclasses import dataclass, field, replace

import httpx
from a2a.client import A2AClientError, Client, ClientCallContext, ClientConfig, ClientFactory
from a2a.helpers import get_artifact_text, get_message_text
from a2a.types import CancelTaskRequest, Message, Part, Role, SendMessageRequest, StreamResponse, TaskState
from a2a.utils.constants import TransportProtocol
from a2a.utils.errors import A2AError
from django.conf import settings
from django.utils.translation import gettext_lazy as _
from loguru import logger

from campus_agent.base.errors import DOWNSTREAM, SUBAGENT_INTERNAL
from campus_agent.base.redaction import clip_text, mask_token
from campus_agent.base.tracing import trace_headers_add
from subagents_app.a2a_card import AgentCardError, AgentCardInfo, aagent_card_fetch
from subagents_app.client import (
    CONNECT_FAILED_NOTICE,
    CONNECT_FAILED_TEXT,
    EMPTY_ANSWER_TEXT,
    ERROR_EVENT_NOTICE,
    ERROR_EVENT_TEXT,
    HTTP_ERROR_NOTICE,
    HTTP_ERROR_TEXT,
    TIMEOUT_NOTICE,
    TIMEOUT_TEXT,
    ChunkCallback,
    LoopHttpClients,
    SubAgentReply,
    subagent_label,
    subagent_text_clean,
    text_cut,
)
from subagents_app.limits import (
    CUT_EVENTS,
    CUT_TEXT,
    YIELD_EVERY_FRAMES,
    CappedTransport,
    StreamCaps,
    StreamCut,
    cut_marker,
    size_text,
    stream_cut_of,
)
from subagents_app.models import SubAgent

INPUT_REQUIRED_TEXT = (
    "子 Agent 需要补充信息才能回答：{question}\n"
    "（本次调用已结束。请把这个问题转告学生；学生补充后，再带上完整信息重新调用。）"
)
AUTH_REQUIRED_TEXT = (
    "子 Agent 要求额外的身份验证才能回答：{detail}\n"
    "（本次调用已结束，网关无法代学生完成这种验证。请告诉学生该服务暂时无法在这里回答。）"
)
AUTH_REQUIRED_NOTICE = _("「{label}」服务需要额外的身份验证，暂时无法在这里回答。")
NO_DETAIL = "（对方没有说明）"
# The agent's own words when it ends a task without them.
STATE_WORDS = {
    TaskState.TASK_STATE_FAILED: "任务失败",
    TaskState.TASK_STATE_REJECTED: "任务被拒绝",
    TaskState.TASK_STATE_CANCELED: "任务已被取消",
}
CUT_REASON = "the A2A stream ended before the task finished"
CANCEL_TIMEOUT_SEC = 5.0
STATUS_MAX_CHARS = 2000  # a status message (progress, a failure, a question for the student)
# An artifact's text parts are pieces of one text (an agent streaming with `append` adds parts):
# joined as they were streamed, with nothing between.
PART_JOIN = ""

FINISHED = {TaskState.TASK_STATE_COMPLETED}
FAILED = set(STATE_WORDS)
INTERRUPTED = {TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED}


def a2a_headers(*, request_id: str, conversation_id: str, campus_token: str | None = None) -> dict[str, str]:
    """Every header the gateway adds to a request to an A2A agent (card, message, cancel):
    `X-Request-Id` and, while tracing is on, the `traceparent` of the tool's span
    (campus_agent.base.tracing), the parent conversation, and the campus token when the card asks for it."""
    headers = {"X-Parent-Conversation-Id": conversation_id}
    trace_headers_add(headers, request_id=request_id)
    if campus_token:
        headers["Authorization"] = f"Bearer {campus_token}"
    return headers


# Its own clients, apart from the seed client's: a2a-sdk sets its version header on the client it is given.
_clients = LoopHttpClients(wrap=lambda transport: CappedTransport(transport, StreamCaps.a2a))
# Cancels sent after their call ended: held so they are not garbage-collected half-way.
_cancels: set[asyncio.Task] = set()


async def a2a_client_close() -> None:
    """Closes this loop's shared client (tests, shutdown)."""
    await _clients.close()


def _sdk_client(info: AgentCardInfo) -> Client:
    config = ClientConfig(httpx_client=_clients.get(), streaming=info.streaming,
                          supported_protocol_bindings=[TransportProtocol.JSONRPC])
    return ClientFactory(config).create(info.card)


@dataclass
class _Task:
    """What the agent said so far about the one task of this call."""

    on_chunk: ChunkCallback | None
    task_id: str = ""
    context_id: str = ""
    state: int = TaskState.TASK_STATE_UNSPECIFIED
    status_text: str = ""
    artifacts: dict[str, str] = field(default_factory=dict)  # artifact id -> its text so far
    answer: str | None = None  # an agent that answers with a Message instead of a task
    streamed: bool = False  # some artifact text went out live

    text_size: int = 0  # characters of answer text held (artifacts, or the Message)
    text_cap: int = 0  # A2A_TEXT_MAX_BYTES, set per call
    over: bool = False  # the text cap was reached: the call ends after this event

    async def _emit(self, text: str) -> None:
        if text and self.on_chunk is not None:
            await self.on_chunk(text)

    def _admit(self, text: str, *, replaces: int = 0) -> str:
        """The part of new answer text the text cap lets in (`replaces`: characters it takes the
        place of, in bytes); sets `over` when it had to cut."""
        room = max(self.text_cap - (self.text_size - replaces), 0)
        if len(text) > room // 4:  # else it fits whatever its characters (UTF-8: at most 4 bytes each)
            encoded = text.encode("utf-8", "surrogatepass")
            if len(encoded) > room:
                # The longest prefix that fits, not cutting a character in half.
                text = encoded[:room].decode("utf-8", "ignore")
                self.over = True
        self.text_size += len(text.encode("utf-8", "surrogatepass")) - replaces
        return text

    async def take(self, event: StreamResponse) -> bool:
        """Records one event and streams its text; True once the call is over. Raises StreamCut
        when the answer's text passes its cap (what fits was kept and streamed)."""
        kind = event.WhichOneof("payload")
        if kind == "message":
            self.answer = self._admit(subagent_text_clean(get_message_text(event.message)))
            await self._emit(self.answer)
            self._check_over()
            return True
        if kind == "task":
            task = event.task
            self.task_id = task.id or self.task_id
            self.context_id = task.context_id or self.context_id
            self.text_size = 0
            self.artifacts = {a.artifact_id or str(i): self._admit(subagent_text_clean(get_artifact_text(a, PART_JOIN)))
                              for i, a in enumerate(task.artifacts)}
            self._status(task.status)
            if (self.state in FINISHED or self.over) and not self.streamed:
                await self._emit(self.text())  # a plain send: the whole answer at once
            self._check_over()
        elif kind == "status_update":
            self.task_id = event.status_update.task_id or self.task_id
            self.context_id = event.status_update.context_id or self.context_id
            self._status(event.status_update.status)
            if self.state not in FINISHED | FAILED | INTERRUPTED and self.status_text:
                await self._emit(self.status_text + "\n")  # progress ("正在查询…")
        elif kind == "artifact_update":
            update = event.artifact_update
            self.task_id = update.task_id or self.task_id
            key = update.artifact.artifact_id
            before = self.artifacts.get(key, "")
            text = subagent_text_clean(get_artifact_text(update.artifact, PART_JOIN))
            if update.append:
                text = self._admit(text)
                self.artifacts[key] = before + text
            else:
                text = self._admit(text, replaces=len(before.encode("utf-8", "surrogatepass")))
                self.artifacts[key] = text
            self.streamed = self.streamed or bool(text)
            await self._emit(text)
            self._check_over()
        return self.state in FINISHED | FAILED | INTERRUPTED

    def _check_over(self) -> None:
        if self.over:
            raise StreamCut(CUT_TEXT.format(limit=size_text(self.text_cap)))

    async def cut_reply(self, cut: StreamCut) -> SubAgentReply:
        """A cap was reached: the text so far and the marker; the student is shown the marker too."""
        kept = self.answer if self.answer is not None else "\n".join(t for t in self.artifacts.values() if t)
        marker = cut_marker(reason=cut.reason, kept=len(kept))
        await self._emit(marker if kept else marker.lstrip("\n"))
        return SubAgentReply(ok=True, text=(kept + marker).lstrip("\n"), cut=cut.reason)

    def _status(self, status) -> None:
        self.state = status.state
        text = get_message_text(status.message) if status.HasField("message") else ""
        # A progress or failure sentence, not the answer: kept short whatever the agent sends.
        self.status_text = text_cut(subagent_text_clean(text), STATUS_MAX_CHARS)

    def text(self) -> str:
        return "\n".join(t for t in self.artifacts.values() if t) or self.status_text

    def reply(self) -> SubAgentReply:
        if self.answer is not None:
            return SubAgentReply(ok=True, text=self.answer or EMPTY_ANSWER_TEXT)
        if self.state in FINISHED:
            return SubAgentReply(ok=True, text=self.text() or EMPTY_ANSWER_TEXT)
        if self.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            # Not a failure: the agent asks something the model can put to the student.
            asks = {"message": self.status_text or NO_DETAIL, "task_id": self.task_id, "context_id": self.context_id}
            return SubAgentReply(ok=True, text=INPUT_REQUIRED_TEXT.format(question=self.status_text or NO_DETAIL),
                                 asks=asks if self.task_id else None)
        if self.state == TaskState.TASK_STATE_AUTH_REQUIRED:
            return SubAgentReply(ok=False, text=AUTH_REQUIRED_TEXT.format(detail=self.status_text or NO_DETAIL),
                                 notice=AUTH_REQUIRED_NOTICE)
        if self.state in FAILED:
            message = self.status_text or STATE_WORDS[self.state]
            return SubAgentReply(ok=False, text=ERROR_EVENT_TEXT.format(message=message), code=SUBAGENT_INTERNAL,
                                 notice=ERROR_EVENT_NOTICE)
        # The stream closed while the task was still working: as a connection cut mid-stream.
        return _connect_failed(CUT_REASON)


def _connect_failed(reason: str) -> SubAgentReply:
    return SubAgentReply(ok=False, text=CONNECT_FAILED_TEXT.format(reason=reason), code=DOWNSTREAM,
                         notice=CONNECT_FAILED_NOTICE)


def _http_status(exc: BaseException) -> int | None:
    """The HTTP status behind an SDK error (it wraps httpx's HTTPStatusError), if any."""
    while exc is not None:
        if isinstance(exc, httpx.HTTPStatusError):
            return exc.response.status_code
        exc = exc.__cause__
    return None


def _failure(exc: Exception) -> SubAgentReply:
    """The contract's reply for what went wrong."""
    if isinstance(exc, AgentCardError):
        if exc.status is not None:
            return _status_failed(exc.status)
        return _connect_failed(exc.message)
    status = _http_status(exc)
    if status is not None:
        return _status_failed(status)
    if isinstance(exc, A2AError) and not isinstance(exc, A2AClientError):
        # A JSON-RPC error the agent sent (invalid params, internal error …): it answered.
        message = getattr(exc, "message", "") or str(exc) or type(exc).__name__
        return SubAgentReply(ok=False, text=ERROR_EVENT_TEXT.format(message=message), code=SUBAGENT_INTERNAL,
                             notice=ERROR_EVENT_NOTICE)
    # Connection errors, a cut or garbled stream, a result that is not A2A: the call failed.
    return _connect_failed(str(exc) or type(exc).__name__)


def _status_failed(status: int) -> SubAgentReply:
    return SubAgentReply(ok=False, text=HTTP_ERROR_TEXT.format(status=status), code=SUBAGENT_INTERNAL,
                         notice=HTTP_ERROR_NOTICE, status=status)


async def _cancel_remote(client: Client, task_id: str, headers: dict[str, str], name: str) -> None:
    try:
        async with asyncio.timeout(CANCEL_TIMEOUT_SEC):
            await client.cancel_task(CancelTaskRequest(id=task_id),
                                     context=ClientCallContext(service_parameters=headers))
        logger.debug("A2A task cancelled name={} task={}", name, task_id)
    except Exception as exc:  # noqa: BLE001 - best effort: the task may have just ended
        logger.debug("A2A task cancel failed name={} task={}: {}", name, task_id, exc)


def _cancel_soon(client: Client | None, task: _Task, headers: dict[str, str], name: str) -> None:
    """Cancels the agent's task without making the caller wait: the call is already over (a stop
    must end the turn at once, and a cancelled coroutine cannot reliably await)."""
    if client is None or not task.task_id or task.state in FINISHED | FAILED | INTERRUPTED:
        return
    pending = asyncio.get_running_loop().create_task(_cancel_remote(client, task.task_id, headers, name))
    _cancels.add(pending)
    pending.add_done_callback(_cancels.discard)


async def a2a_task_cancel(*, sub_agent: SubAgent, task_id: str, request_id: str, conversation_id: str,
                          campus_token: str | None) -> None:
    """Cancels a task of the agent that waited for the student's answer, which will not come
    (declined, or its time ran out); best effort, within the sub-agent's timeout."""
    plain = a2a_headers(request_id=request_id, conversation_id=conversation_id)
    try:
        async with asyncio.timeout(sub_agent.timeout_sec):
            info = await aagent_card_fetch(client=_clients.get(), base_url=sub_agent.base_url, headers=plain)
            if not info.callable:
                raise AgentCardError(info.problem)
            headers = a2a_headers(request_id=request_id, conversation_id=conversation_id,
                                  campus_token=campus_token) if info.bearer else plain
            await _cancel_remote(_sdk_client(info), task_id, headers, sub_agent.name)
    except Exception as exc:  # noqa: BLE001 - best effort: the agent may be gone, the task ended
        logger.debug("A2A task cancel failed name={} task={}: {}", sub_agent.name, task_id, exc)


async def a2a_call(
    *,
    sub_agent: SubAgent,
    message: str,
    request_id: str,
    conversation_id: str,
    campus_token: str | None,
    on_chunk: ChunkCallback | None = None,
    goes_on: dict | None = None,
) -> SubAgentReply:
    """Sends `message` to the A2A agent and reads its answer within `timeout_sec` overall (see the
    module's docstring). No retry, as for the seed contract. `goes_on` ({"task_id",
    "context_id"} of a reply's `asks`): the message is the student's answer, continuing that task."""
    started = time.perf_counter()
    logger.debug("A2A call name={} message={} token={}", sub_agent.name, clip_text(message), mask_token(campus_token))
    plain = a2a_headers(request_id=request_id, conversation_id=conversation_id)
    headers = plain
    client: Client | None = None
    task = _Task(on_chunk=on_chunk, text_cap=settings.A2A_TEXT_MAX_BYTES)
    try:
        async with asyncio.timeout(sub_agent.timeout_sec):
            info = await aagent_card_fetch(client=_clients.get(), base_url=sub_agent.base_url, headers=plain)
            if not info.callable:
                raise AgentCardError(info.problem)
            if info.bearer:  # the only case the campus token leaves the gateway for an A2A agent
                headers = a2a_headers(request_id=request_id, conversation_id=conversation_id,
                                      campus_token=campus_token)
            client = _sdk_client(info)
            reply = await _send(client, task, message=message, domain=sub_agent.domain, headers=headers,
                                goes_on=goes_on)
    except TimeoutError:
        _cancel_soon(client, task, headers, sub_agent.name)
        reply = SubAgentReply(ok=False, text=TIMEOUT_TEXT, code=DOWNSTREAM, notice=TIMEOUT_NOTICE)
    except asyncio.CancelledError:
        _cancel_soon(client, task, headers, sub_agent.name)
        raise
    except Exception as exc:  # noqa: BLE001 - whatever an agent sends ends the call with a contract text
        _cancel_soon(client, task, headers, sub_agent.name)
        cut = stream_cut_of(exc)  # a cap (limits.py): raised by us, or by the transport under the SDK
        reply = await task.cut_reply(cut) if cut is not None else _failure(exc)
    if reply.notice:
        reply = replace(reply, notice=reply.notice.format(label=subagent_label(sub_agent)))
    logger.log(  # as the seed contract's: a failure's reason is a warning, the rest DEBUG
        "DEBUG" if reply.ok else "WARNING",
        "A2A done name={} ok={} code={} task={} cost_ms={:.0f}{}",
        sub_agent.name, reply.ok, reply.code, task.task_id or "-", (time.perf_counter() - started) * 1000,
        "" if reply.ok else f" failure={clip_text(reply.text, 200)}",
    )
    return reply


async def _send(client: Client, task: _Task, *, message: str, domain: str, headers: dict[str, str],
                goes_on: dict | None = None) -> SubAgentReply:
    sent = Message(role=Role.ROLE_USER, message_id=uuid.uuid4().hex, parts=[Part(text=message)])
    if goes_on:
        sent.task_id, sent.context_id = str(goes_on.get("task_id", "")), str(goes_on.get("context_id", ""))
        task.task_id = sent.task_id
    request = SendMessageRequest(message=sent, metadata={"domain": domain} if domain else None)
    context = ClientCallContext(service_parameters=headers)
    # aclosing: a stop or the deadline closes the HTTP stream at once, not when it is collected.
    max_events = settings.A2A_MAX_EVENTS
    count = 0
    async with aclosing(client.send_message(request, context=context)) as events:
        async for event in events:
            count += 1
            if count > max_events:
                raise StreamCut(CUT_EVENTS.format(limit=f"{max_events:,}"))
            if await task.take(event):
                break
            if count % YIELD_EVERY_FRAMES == 0:
                await asyncio.sleep(0)  # a burst of events must not hold the worker's loop
    return task.reply()
