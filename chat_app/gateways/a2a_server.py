"""The campus agent as an A2A agent (docs/design.md#other-clients): a2a-sdk's server side, A2A 1.0, JSON-RPC binding.

    GET  /.well-known/agent-card.json   the default agent's card (public): the JSON-RPC URL, bearer
                                        auth, streaming, one skill per enabled agent open to all
    POST /a2a/                          JSON-RPC: SendMessage, SendStreamingMessage, GetTask,
                                        CancelTask, SubscribeToTask, GetExtendedAgentCard (the
                                        card with a skill per agent the caller's groups may use)
                                        (Bearer: API key or JWT)

A task is a run (task id = run id) and a context is a conversation (context id = conversation
id). Nothing is kept in the SDK's task store: `CampusRequestHandler` answers every method from
the run's rows and its run bus (chat_app.gateways.inbound), so any worker answers for any task, and a
task outlives the request that started it exactly as a run does (docs/design.md#runs).

How a run's frames (docs/design.md#the-chat-stream) become A2A events (`TaskFold`):

    session            the Task (state working, the question in its history)
    chunk              artifact `answer` update, `append` after the first
    tool_call          status working, "调用 食堂助手…"
    approval_required  status input-required: approve on the page (the stream ends there)
    error 40102        the task ends auth-required (log in again on the page)
    done               completed | failed (interrupted by a failure) | canceled (stopped)

The answer artifact's `metadata` (and the final status update's) carries the answer's implicit
label `{"aigc": …}` (safety_app.labels); who answered is in it once the run is done.

Decisions (docs/clients.md, "A2A clients"): admission refusals that are not the client's
mistake (429 limits and quota, no agent) are a `rejected` task carrying the Chinese message (it
is not stored: nothing ran); a context or task that is not the caller's is "not found"; a
message naming a task is refused (a task is one turn: continue with `context_id`); text parts
only. A client that goes away does not stop the run (it can come back with GetTask or
SubscribeToTask); CancelTask does.
"""
from __future__ import annotations

import asyncio
import functools
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field

from a2a.auth.user import User
from a2a.server.context import ServerCallContext
from a2a.server.jsonrpc_models import JSONParseError
from a2a.server.request_handlers import RequestHandler, validate_request_params
from a2a.server.request_handlers.response_helpers import agent_card_to_dict, build_error_response
from a2a.server.routes import DefaultServerCallContextBuilder, create_jsonrpc_routes
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Artifact,
    HTTPAuthSecurityScheme,
    Message,
    Part,
    Role,
    SecurityRequirement,
    SecurityScheme,
    StringList,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH, PROTOCOL_VERSION_1_0
from a2a.utils.errors import (
    ContentTypeNotSupportedError,
    InvalidParamsError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from django.utils.text import format_lazy
from django.utils.translation import gettext_lazy as _
from loguru import logger
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from agents_app.access import EVERYONE, Audience, agents_for, audience_of
from agents_app.runtime.events import WAITING_FRAME_TYPES
from campus_agent.base import errors
from campus_agent.base.asyncdb import db_call
from campus_agent.base.errors import CAMPUS_TOKEN_EXPIRED
from campus_agent.base.json_body import JsonBodyRefused, json_object_decode
from campus_agent.base.request_id import HEADER as REQUEST_ID_HEADER
from campus_agent.base.request_id import request_id_from_header, request_id_set
from chat_app.accounts.authentication import Caller
from chat_app.gateways.answer_text import AnswerText
from chat_app.gateways.catalog import agent_catalogs, turn_tool_labels
from chat_app.gateways.inbound import InboundTurn, bearer_caller, frames_decoded, inbound_turn_start
from chat_app.models import Message as Row
from chat_app.models import Run
from chat_app.runs.bus import run_bus
from chat_app.runs.chat_input import chat_input_parse
from chat_app.runs.engine import StopOutcome
from chat_app.runs.state import run_get
from chat_app.runs.wait import waiting_frames
from safety_app.labels import AIGC_KEY, aigc_label

# The knowledge passages an answer read, beside its label in the artifact's metadata.
SOURCES_KEY = "sources"
A2A_PATH = "/a2a/"
CARD_PATH = AGENT_CARD_WELL_KNOWN_PATH
ANSWER_ARTIFACT_ID = "answer"
ANSWER_ARTIFACT_NAME = "回答"
MESSAGE_PARTS_MAX = 16
PART_JOIN = "\n"
CANCEL_SETTLE_SEC = 5.0  # how long CancelTask waits for the stopped run to store its end
CARD_VERSION = "1.0.0"
CARD_DESCRIPTION = "校园小智：回答学生关于校园生活的问题（食堂、课程、通知、教务等），按需调用校园服务。"
SKILL_DESCRIPTION = "可以使用：{services}。"
SKILL_NO_SERVICES = "直接回答校园生活问题。"
BEARER_DESCRIPTION = "个人 API 密钥（cak_…，在校园小智网页上创建）或登录得到的 JWT：Authorization: Bearer <key>"

# What the client reads in a task's status (and in JSON-RPC errors). Tests assert these.
TOOL_STATUS_TEXT = _("调用 {label}…")
APPROVAL_TEXT = (
    "{tools} 需要你批准后才能运行：请在校园小智网页上打开这段对话，批准或拒绝（{expires} 前有效）。"
    "批准后回答会继续，用 GetTask 或 SubscribeToTask 查看。"
)
AUTH_REQUIRED_TEXT = _("校园账号的登录已过期：请在校园小智网页上重新登录校园账号，然后再问一次。")
CANCELED_TEXT = _("回答已停止。")
FAILED_TEXT = _("回答未完成。")
MSG_NOT_FOUND = _("任务或对话不存在。")
MSG_TEXT_ONLY = _("暂时只支持文字消息（text 部分），不支持文件或数据部分。")
MSG_TOO_MANY_PARTS = format_lazy(_("消息最多 {limit} 个部分。"), limit=MESSAGE_PARTS_MAX)
MSG_TASK_IS_ONE_TURN = _("一个任务就是一轮问答，不能再往里发消息：继续对话请只带 context_id（对话 ID）发新消息。")
WAITING_TEXT = (
    "{tools} 需要你先在校园小智网页上打开这段对话，连接账号或回答服务提出的问题（{expires} 前有效）。"
    "完成后回答会继续，用 GetTask 或 SubscribeToTask 查看。"
)
MSG_APPROVE_ON_PAGE = _("这个任务在等你批准工具运行：请在校园小智网页上打开这段对话批准或拒绝，不能用消息回答。")
MSG_AGENT_FIELD = _("metadata.agent 必须是智能体的 slug（字符串）。")
MSG_TASK_ENDED = _("任务已经结束，无法取消。")
MSG_ENDED_USE_GET = _("任务已经结束：用 GetTask 读取结果。")
MSG_UNREACHABLE = _("暂时无法停止这个任务（它在另一个服务进程上运行），请稍后再试。")
MSG_NOT_SUPPORTED = _("不支持这个方法。")


# --- a task, as folded from a run's frames or read from its rows --------------------------------

@dataclass
class TaskFold:
    """What a client knows of one task: fed the run's frames one by one (`take`, which returns the
    A2A events to stream), or filled from the stored rows (`task_read`). `task()` is the Task."""

    task_id: str
    context_id: str
    question: str = ""
    question_id: str = ""
    labels: dict = field(default_factory=dict)  # turn_tool_labels()
    text: str = ""
    streamed: bool = False  # some answer text went out as an artifact update
    # The answer with a paragraph break around each tool call, as on the page (answer_text.py).
    answer: AnswerText = field(default_factory=AnswerText)
    ended: bool = False
    interrupted: bool = False
    errors: list[tuple[int, str]] = field(default_factory=list)
    waiting: list[dict] = field(default_factory=list)  # approval_required payloads
    progress: str = ""  # the last status line while it works
    message_id: str = ""  # the run's answer message: the ProduceID of its implicit label
    provider: str = ""  # who answered (the `done` frame's, or the stored reply's meta)
    model: str = ""
    sources: list = field(default_factory=list)  # the knowledge passages the answer read (`done`'s, or meta's)

    def take(self, frame: dict) -> list:
        kind = frame.get("type")
        if kind == "chunk":
            content = self.answer.chunk(frame.get("content") or "")
            if not content:
                return []
            append = self.streamed
            self.text = self.answer.text
            self.streamed = True
            return [self._artifact_update(content, append=append)]
        if kind == "tool_call":
            self.answer.paragraph_break()
            self.progress = TOOL_STATUS_TEXT.format(label=tool_label(frame.get("tool", ""), self.labels))
            return [self.status_update()]
        if kind == "tool_result":
            self.progress = ""
            return []
        if kind == "error":
            self.errors.append((frame.get("code"), frame.get("message") or ""))
            return []
        if kind in WAITING_FRAME_TYPES:
            self.waiting.append(frame)
            return []
        if kind == "done":
            events = []
            full = frame.get("full_text") or ""
            # Text the chunks did not carry (a keyword-routed answer, a cut turn's closing text).
            if rest := self.answer.rest(full):
                events.append(self._artifact_update(rest, append=self.streamed, last=True))
                self.streamed = True
            self.text = self.answer.text or full
            self.ended = True
            self.interrupted = bool(frame.get("interrupted"))
            self.provider, self.model = frame.get("provider") or "", frame.get("model") or ""
            self.sources = frame.get("sources") or []
            events.append(self.status_update())
            return events
        return []  # session, reasoning (apart from the answer), tool_chunk

    @property
    def state(self) -> int:
        if self.waiting and not self.ended:
            return TaskState.TASK_STATE_INPUT_REQUIRED
        if not self.ended:
            return TaskState.TASK_STATE_WORKING
        if any(code == CAMPUS_TOKEN_EXPIRED for code, _ in self.errors):
            return TaskState.TASK_STATE_AUTH_REQUIRED
        if self.interrupted:
            return TaskState.TASK_STATE_FAILED if self.errors else TaskState.TASK_STATE_CANCELED
        return TaskState.TASK_STATE_COMPLETED

    def status_text(self) -> str:
        state = self.state
        if state == TaskState.TASK_STATE_WORKING:
            return self.progress
        if state == TaskState.TASK_STATE_INPUT_REQUIRED:
            tools = "、".join(dict.fromkeys(f"「{tool_label(w.get('tool', ''), self.labels)}」" for w in self.waiting))
            expires = min(str(w.get("expires_at", "")) for w in self.waiting)
            text = APPROVAL_TEXT if all(w.get("type") == "approval_required" for w in self.waiting) else WAITING_TEXT
            return text.format(tools=tools, expires=expires)
        if state == TaskState.TASK_STATE_AUTH_REQUIRED:
            return str(AUTH_REQUIRED_TEXT)
        if state == TaskState.TASK_STATE_FAILED:
            return self.errors[-1][1] or str(FAILED_TEXT)
        if state == TaskState.TASK_STATE_CANCELED:
            return str(CANCELED_TEXT)
        return ""

    def status(self) -> TaskStatus:
        status = TaskStatus(state=self.state)
        text = self.status_text()
        if text:
            status.message.CopyFrom(Message(role=Role.ROLE_AGENT, message_id=uuid.uuid4().hex, task_id=self.task_id,
                                            context_id=self.context_id, parts=[Part(text=text)]))
        status.timestamp.GetCurrentTime()
        return status

    def label(self) -> dict:
        """The answer's implicit label (safety_app.labels), as A2A metadata: `{"aigc": …}`; with the
        knowledge passages it read, once known: `{"sources": […]}` (docs/clients.md)."""
        label = {AIGC_KEY: aigc_label(produce_id=self.message_id, provider=self.provider, model=self.model)}
        return {**label, SOURCES_KEY: self.sources} if self.sources else label

    def task(self) -> Task:
        task = Task(id=self.task_id, context_id=self.context_id, status=self.status())
        if self.text:
            artifact = Artifact(artifact_id=ANSWER_ARTIFACT_ID, name=ANSWER_ARTIFACT_NAME, parts=[Part(text=self.text)])
            artifact.metadata.update(self.label())
            task.artifacts.append(artifact)
        if self.question:
            task.history.append(Message(role=Role.ROLE_USER, message_id=self.question_id or uuid.uuid4().hex,
                                        task_id=self.task_id, context_id=self.context_id,
                                        parts=[Part(text=self.question)]))
        return task

    def status_update(self) -> TaskStatusUpdateEvent:
        event = TaskStatusUpdateEvent(task_id=self.task_id, context_id=self.context_id, status=self.status())
        if self.ended and self.text:
            # The streamed answer's label complete (who answered is known only at its end).
            event.metadata.update(self.label())
        return event

    def _artifact_update(self, text: str, *, append: bool, last: bool = False) -> TaskArtifactUpdateEvent:
        artifact = Artifact(artifact_id=ANSWER_ARTIFACT_ID, name=ANSWER_ARTIFACT_NAME, parts=[Part(text=text)])
        artifact.metadata.update(self.label())
        return TaskArtifactUpdateEvent(task_id=self.task_id, context_id=self.context_id, append=append,
                                       last_chunk=last, artifact=artifact)


def tool_label(tool: str, labels: dict) -> str:
    """The name staff gave the tool's sub-agent or MCP service (as the page shows it)."""
    if tool in labels.get("names", {}):
        return labels["names"][tool]
    for prefix, label in labels.get("prefixes", []):
        if tool.startswith(prefix):
            return label
    return tool


# --- reads (sync, one database call each) --------------------------------------------------------

@dataclass(frozen=True)
class TaskRecord:
    run: Run
    fold: TaskFold


def task_read(*, user, task_id: str) -> TaskRecord | None:
    """The caller's task as its rows hold it (None: no such run of this user's). An ended run's
    answer is its stored rows (every round's text, as `done.full_text`); a running run's is what
    it stored plus its checkpoint (≤ RUN_HEARTBEAT_SEC behind) — the bus gives the live text."""
    run = run_get(user=user, run_id=task_id)
    if run is None:
        return None
    fold = TaskFold(task_id=str(run.id), context_id=str(run.conversation_id),
                    labels=turn_tool_labels(), message_id=str(run.message_id))
    question = (Row.objects.filter(conversation_id=run.conversation_id, request_id=run.request_id,
                                   role=Row.Role.USER, created_at__lte=run.started_at)
                .order_by("-created_at", "-seq").first())
    if question is not None:
        fold.question, fold.question_id = question.content, str(question.id)
    rows = []
    answers = Row.objects.filter(conversation_id=run.conversation_id, request_id=run.request_id,
                                 role=Row.Role.ASSISTANT, created_at__gte=run.started_at, superseded=False)
    for row in answers.order_by("created_at", "seq"):
        rows.append(row)
        if row.id == run.message_id:  # its reply is its last row
            break
    final = rows[-1] if rows and rows[-1].id == run.message_id else None
    fold.text = AnswerText.of_rounds([r.content for r in rows] + ([] if final is not None else [run.partial_text]))
    if not run.active:
        fold.ended = True
        meta = final.meta if final is not None else {}
        fold.provider, fold.model = meta.get("provider") or "", meta.get("model") or ""
        fold.sources = meta.get("sources") if isinstance(meta.get("sources"), list) else []
        fold.interrupted = run.status == Run.Status.INTERRUPTED or bool(meta.get("interrupted"))
        fold.errors = [(e.get("code"), e.get("message") or "") for e in meta.get("errors", []) if isinstance(e, dict)]
    elif run.status == Run.Status.WAITING:
        fold.waiting = waiting_frames(run=run)
    return TaskRecord(run=run, fold=fold)


def _waiting_read(*, run_id) -> list[dict]:
    """What a run that has just paused waits for (every call, from its rows); [] when it no longer waits."""
    run = Run.objects.filter(id=run_id, status=Run.Status.WAITING).first()
    return waiting_frames(run=run) if run is not None else []


def _card_data(audience: Audience) -> tuple[str, list[dict]]:
    agents = agents_for(audience=audience)
    catalogs = agent_catalogs(agents=agents, audience=audience)
    skills = []
    for agent in agents:
        catalog = catalogs.get(agent.slug, {})
        services = [s["label"] for s in catalog.get("services", [])]
        skills.append({
            "id": agent.slug, "name": agent.name,
            "description": SKILL_DESCRIPTION.format(services="、".join(services)) if services else SKILL_NO_SERVICES,
            "tags": services or ["校园"], "examples": catalog.get("examples", []),
        })
    default_name = skills[0]["name"] if skills else "校园小智"
    return default_name, skills


def agent_card_build(*, origin: str, audience: Audience = EVERYONE) -> AgentCard:
    """The card of the default agent, with one skill per enabled agent `audience` may use (sync:
    reads the catalog). The public card is everyone's: an agent limited to groups is on no public
    card (agents_app.access); the extended card, asked with the caller's credential, lists theirs."""
    name, skills = _card_data(audience)
    card = AgentCard(
        name=name,
        description=CARD_DESCRIPTION,
        version=CARD_VERSION,
        supported_interfaces=[AgentInterface(url=f"{origin}{A2A_PATH}", protocol_binding="JSONRPC",
                                             protocol_version=PROTOCOL_VERSION_1_0)],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False, extended_agent_card=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(**skill) for skill in skills],
    )
    card.security_schemes["bearer"].CopyFrom(SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(
        scheme="Bearer", bearer_format="cak_… / JWT", description=BEARER_DESCRIPTION)))
    card.security_requirements.append(SecurityRequirement(schemes={"bearer": StringList()}))
    return card


# --- the request handler --------------------------------------------------------------------------

def _caller(context: ServerCallContext) -> Caller:
    return context.state["caller"]


def _message_text(message: Message) -> str:
    if len(message.parts) > MESSAGE_PARTS_MAX:
        raise InvalidParamsError(str(MSG_TOO_MANY_PARTS))
    texts = []
    for part in message.parts:
        if part.WhichOneof("content") != "text":
            raise ContentTypeNotSupportedError(str(MSG_TEXT_ONLY))
        texts.append(part.text)
    return PART_JOIN.join(texts)


def _metadata_agent(request) -> str | None:
    for metadata in (request.metadata, request.message.metadata):
        if "agent" in metadata.fields:
            value = metadata.fields["agent"]
            if value.WhichOneof("kind") != "string_value":
                raise InvalidParamsError(str(MSG_AGENT_FIELD))
            return value.string_value
    return None


def _rejected(refusal: errors.ApiError, *, context_id: str) -> Task:
    """A turn refused before it ran (limits, quota, no agent): a rejected task with the message.
    It is not stored (nothing ran): GetTask does not know it."""
    task = Task(id=uuid.uuid4().hex, context_id=context_id, status=TaskStatus(state=TaskState.TASK_STATE_REJECTED))
    task.status.message.CopyFrom(Message(role=Role.ROLE_AGENT, message_id=uuid.uuid4().hex, task_id=task.id,
                                         context_id=context_id, parts=[Part(text=refusal.message)]))
    task.status.timestamp.GetCurrentTime()
    task.metadata.update({"code": refusal.code, "status": refusal.status,
                          **({"retry_after_sec": int(refusal.headers["Retry-After"])}
                             if "Retry-After" in refusal.headers else {})})
    return task


@dataclass
class _Started:
    """A turn started (its run and fold), or refused before it ran (`refused`: the rejected task)."""

    turn: InboundTurn | None
    fold: TaskFold | None
    refused: Task | None = None


class CampusRequestHandler(RequestHandler):
    """Every A2A method on our runs (module docstring). The caller is the context's `caller`
    (A2aAuth put it there); a run of anyone else is "not found"."""

    async def _start(self, params, context: ServerCallContext) -> _Started:
        caller = _caller(context)
        message = params.message
        if message.task_id:
            record = await db_call(task_read, user=caller.user, task_id=message.task_id)
            if record is None:
                raise TaskNotFoundError(str(MSG_NOT_FOUND))
            raise InvalidParamsError(str(MSG_APPROVE_ON_PAGE if record.fold.waiting else MSG_TASK_IS_ONE_TURN))
        body = {"message": _message_text(message), "conversation_id": message.context_id or None,
                "agent": _metadata_agent(params)}
        try:
            uuid.UUID(message.context_id) if message.context_id else None
        except ValueError:
            raise TaskNotFoundError(str(MSG_NOT_FOUND)) from None
        request_id = context.state.get("campus_request_id") or request_id_from_header(None)
        try:
            chat = chat_input_parse(body=body)
            turn = await inbound_turn_start(caller=caller, chat=chat, request_id=request_id)
        except errors.ApiError as refused:
            if refused.status == 404:
                raise TaskNotFoundError(str(MSG_NOT_FOUND)) from None
            if refused.status == 400:
                raise InvalidParamsError(refused.message) from None
            logger.info("A2A turn refused status={} code={}", refused.status, refused.code)
            return _Started(turn=None, fold=None, refused=_rejected(refused, context_id=message.context_id))
        labels = await db_call(turn_tool_labels)
        fold = TaskFold(task_id=turn.run_id, context_id=turn.conversation_id, question=chat.message,
                        question_id=message.message_id, labels=labels, message_id=turn.message_id)
        return _Started(turn=turn, fold=fold)

    async def _follow(self, turn: InboundTurn, fold: TaskFold) -> AsyncIterator:
        """The run's events from its start until it ends or waits for a person."""
        async with aclosing(turn.frames()) as frames:
            async for frame in frames:
                for event in fold.take(frame):
                    yield event
                if fold.waiting and not fold.ended:
                    # Paused (stored before its frames went out): every call it waits on, from its rows.
                    fold.waiting = await db_call(_waiting_read, run_id=turn.run.id) or fold.waiting
                    yield fold.status_update()
                    return
                if fold.ended:
                    return

    @validate_request_params
    async def on_message_send(self, params, context: ServerCallContext) -> Task:
        started = await self._start(params, context)
        if started.refused is not None:
            return started.refused
        if params.configuration.return_immediately:
            return started.fold.task()
        async for _event in self._follow(started.turn, started.fold):
            pass
        return started.fold.task()

    @validate_request_params
    async def on_message_send_stream(self, params, context: ServerCallContext) -> AsyncIterator:
        started = await self._start(params, context)
        if started.refused is not None:
            yield started.refused
            return
        yield started.fold.task()
        async for event in self._follow(started.turn, started.fold):
            yield event

    async def _record(self, task_id: str, context: ServerCallContext) -> TaskRecord:
        record = await db_call(task_read, user=_caller(context).user, task_id=task_id)
        if record is None:
            raise TaskNotFoundError(str(MSG_NOT_FOUND))
        return record

    async def _live(self, record: TaskRecord) -> TaskFold:
        """A running task's fold from its bus log (every frame so far, without waiting), which any
        worker reads; its rows when the log is not on this bus."""
        if record.run.status != Run.Status.RUNNING:
            return record.fold
        batch = await run_bus().read(record.run.id, after=0, timeout=0)
        if not batch.known or not batch.frames:
            return record.fold
        fold = TaskFold(task_id=record.fold.task_id, context_id=record.fold.context_id,
                        question=record.fold.question, question_id=record.fold.question_id, labels=record.fold.labels,
                        message_id=record.fold.message_id)
        for frame in frames_decoded(batch.frames):
            fold.take(frame)
        return fold

    @validate_request_params
    async def on_get_task(self, params, context: ServerCallContext) -> Task:
        record = await self._record(params.id, context)
        return (await self._live(record)).task()

    @validate_request_params
    async def on_cancel_task(self, params, context: ServerCallContext) -> Task:
        record = await self._record(params.id, context)
        if not record.run.active:
            raise TaskNotCancelableError(str(MSG_TASK_ENDED))
        turn = InboundTurn(run=record.run)
        outcome = await turn.stop("cancelled")
        if outcome == StopOutcome.UNREACHABLE:
            raise TaskNotCancelableError(str(MSG_UNREACHABLE))
        try:  # until its end is stored (the reply so far, interrupted)
            async with asyncio.timeout(CANCEL_SETTLE_SEC), aclosing(turn.frames()) as frames:
                async for frame in frames:
                    if frame.get("type") == "done":
                        break
        except TimeoutError:
            logger.warning("A2A cancel: run {} has not ended within {}s", record.run.id, CANCEL_SETTLE_SEC)
        return (await self._record(params.id, context)).fold.task()

    @validate_request_params
    async def on_subscribe_to_task(self, params, context: ServerCallContext) -> AsyncIterator:
        record = await self._record(params.id, context)
        if not record.run.active:
            raise UnsupportedOperationError(str(MSG_ENDED_USE_GET))
        fold = TaskFold(task_id=record.fold.task_id, context_id=record.fold.context_id,
                        question=record.fold.question, question_id=record.fold.question_id, labels=record.fold.labels,
                        message_id=record.fold.message_id)
        yield fold.task()
        # Its frames from the first: the artifact is rebuilt from its start, then followed live.
        async for event in self._follow(InboundTurn(run=record.run), fold):
            yield event

    async def on_list_tasks(self, params, context: ServerCallContext):
        raise UnsupportedOperationError(str(MSG_NOT_SUPPORTED))

    async def on_create_task_push_notification_config(self, params, context: ServerCallContext):
        raise PushNotificationNotSupportedError()

    async def on_get_task_push_notification_config(self, params, context: ServerCallContext):
        raise PushNotificationNotSupportedError()

    async def on_list_task_push_notification_configs(self, params, context: ServerCallContext):
        raise PushNotificationNotSupportedError()

    async def on_delete_task_push_notification_config(self, params, context: ServerCallContext):
        raise PushNotificationNotSupportedError()

    async def on_get_extended_agent_card(self, params, context: ServerCallContext):
        """The card as the caller sees it: a skill for each agent their groups may use."""
        user = _caller(context).user
        return await db_call(lambda: agent_card_build(origin=context.state["campus_origin"],
                                                      audience=audience_of(user=user)))


# --- HTTP: auth, the body cap, the card ------------------------------------------------------------

class _CallerUser(User):
    def __init__(self, caller: Caller):
        self._caller = caller

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        return self._caller.user.get_username()


class _ContextBuilder(DefaultServerCallContextBuilder):
    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        context.state["caller"] = request.scope["campus_caller"]
        context.state["campus_request_id"] = request.scope["campus_request_id"]
        context.state["campus_origin"] = _origin(request)
        return context

    def build_user(self, request: Request) -> User:
        return _CallerUser(request.scope["campus_caller"])


def _rpc_error(error, *, status: int = 200, headers: dict | None = None) -> JSONResponse:
    return JSONResponse(build_error_response(None, error), status_code=status, headers=headers)


def _bearer(scope) -> str | None:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").strip().partition(" ")
            return token.strip() if scheme.lower() == "bearer" else ""
    return None


def _header(scope, wanted: bytes) -> str | None:
    for name, value in scope.get("headers", []):
        if name == wanted:
            return value.decode("latin-1")
    return None


class A2aAuth:
    """In front of the JSON-RPC app: 401 without a valid Bearer (the body unread), then the body
    (within its cap: campus_agent/intake.py refuses a larger one before it reaches this) checked
    as every JSON body is (campus_agent.base.json_body): a refusal is a JSON-RPC error, never a 5xx."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        request_id = request_id_from_header(_header(scope, REQUEST_ID_HEADER.lower().encode()))
        request_id_set(request_id)
        try:
            caller = await bearer_caller(_bearer(scope))
        except errors.ApiError as refused:
            response = JSONResponse({"code": refused.code, "message": str(refused.message)}, status_code=refused.status,
                                    headers={**refused.headers, REQUEST_ID_HEADER: request_id})
            await response(scope, receive, send)
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        try:
            json_object_decode(bytes(body))
        except JsonBodyRefused as refused:
            await _rpc_error(JSONParseError(message=refused.message))(scope, receive, send)
            return
        scope = {**scope, "campus_caller": caller, "campus_request_id": request_id}
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        async def send_with_id(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []),
                                                  (REQUEST_ID_HEADER.lower().encode(), request_id.encode())]}
            await send(message)

        await self.app(scope, replay, send_with_id)


class _RpcEndpoint:
    """POST only (405 otherwise), `/a2a` as `/a2a/`. A class, not a function: Starlette serves
    an ASGI app as it is."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["method"] != "POST":
            response = JSONResponse({"code": errors.METHOD_NOT_ALLOWED, "message": str(errors.MSG_METHOD)},
                                    status_code=405, headers={"Allow": "POST"})
            await response(scope, receive, send)
            return
        await self.app({**scope, "path": A2A_PATH}, receive, send)


def _origin(request: Request) -> str:
    return f"{request.url.scheme}://{request.url.netloc}"


async def _card(request: Request) -> JSONResponse:
    card = await db_call(agent_card_build, origin=_origin(request))
    request_id = request_id_from_header(request.headers.get(REQUEST_ID_HEADER))
    return JSONResponse(agent_card_to_dict(card), headers={"Cache-Control": "no-cache", REQUEST_ID_HEADER: request_id})


def is_a2a_path(path: str) -> bool:
    return path == CARD_PATH or path in (A2A_PATH, A2A_PATH.rstrip("/"))


@functools.cache
def a2a_app() -> Starlette:
    """The ASGI app of both routes (built on first use)."""
    rpc = Starlette(routes=create_jsonrpc_routes(CampusRequestHandler(), rpc_url=A2A_PATH,
                                                 context_builder=_ContextBuilder()))
    endpoint = _RpcEndpoint(A2aAuth(rpc))
    return Starlette(routes=[
        Route(CARD_PATH, _card, methods=["GET"]),
        Route(A2A_PATH, endpoint),
        Route(A2A_PATH.rstrip("/"), endpoint),
    ])

