"""An A2A agent built with a2a-sdk's server side, with fault modes, for tests.

One server serves several agents, each under its own base URL `{root}/<variant>`:

    stream     Agent Card with streaming; no auth
    plain      the card says no streaming (the client must use a plain message send)
    bearer     streaming; the card declares HTTP bearer auth (the campus token is sent)
    garbage    the card is fine, its JSON-RPC endpoint answers an event stream of non-JSON
    die        the JSON-RPC endpoint streams one artifact update, then cuts the connection
    short      the JSON-RPC stream ends cleanly while the task is still `working`
    http500    the JSON-RPC endpoint answers HTTP 500
    rpcerror   the JSON-RPC endpoint answers a JSON-RPC error object (RPC_ERROR_MESSAGE)
    foreign    the card's JSON-RPC URL is on another origin
    huge       a card of about 300 KB          notjson    a card that is HTML
    odd        a card with fields of the wrong types (`skills: "many"`)
    html       a usable card whose name and skill carry HTML (HOSTILE_NAME): admin must escape it
    nocard     no card (404)
    raw        streaming card; its JSON-RPC endpoint answers an event stream of `raw_bodies[<key>]`
               (`[[mode:raw]] <key>` in the message): bytes, a list of pieces, or a callable
               taking the JSON-RPC request id and returning either (`rpc_frame` builds a frame)

What a task does is chosen by a marker in the message, `[[mode:<name>]]`, as for the contract
sub-agent (contract_agent.py):

    normal     status "working" with STATUS_TEXT, the answer in appended artifact chunks, completed
    failed     working, then `failed` with FAILED_MESSAGE
    canceled   working, then the agent itself ends the task as `canceled`
    input      `input-required`, asking INPUT_QUESTION; a message that continues that task (its
               `taskId`) completes it with INPUT_ANSWER of the message's text, or asks again
               when the text has the marker too
    auth       `auth-required`, saying AUTH_DETAIL
    hang       working and one chunk, then waits until the task is cancelled (tasks/cancel)
    slow       waits `stall_sec` before anything (a timeout test), cancellable the same way
    message    answers with a plain Message, no task
    bigtext    working, then BIGTEXT_PIECES appended artifact chunks of BIGTEXT_PIECE (≈ 1.3 MB
               in all), then completed

`requests` records every HTTP request (path, headers lower-cased); `messages` every message text
the executor received, `metadata` its request metadata, `continued` (task id, text) of each message
that went on with an input-required task; `cancelled` is set (and `cancelled_tasks` appended) when a task is
cancelled through tasks/cancel — what the agent sees of a stop.
"""
from __future__ import annotations

import asyncio
import json
import re
import threading
from dataclasses import dataclass

from a2a.helpers import new_text_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    Part,
    Role,
    SecurityScheme,
    Task,
    TaskState,
    TaskStatus,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from testkit.servers import ServedApp

MODE_PATTERN = re.compile(r"\[\[mode:([a-z0-9_-]+)\]\]")
STATUS_TEXT = "正在查询…"
FAILED_MESSAGE = "馆藏系统维护中"
AGENT_CANCELED_MESSAGE = "任务被管理员取消"
INPUT_QUESTION = "请问您要查询哪个校区的图书馆？"
INPUT_ANSWER = "{answer}图书馆今天开放到 22:00。"
AUTH_DETAIL = "请先在图书馆系统中授权"
SKILL = AgentSkill(id="hours", name="开放时间", description="查询图书馆开放时间", tags=["图书馆"],
                   examples=["图书馆几点关门？"])
VARIANTS = ("stream", "plain", "bearer", "garbage", "die", "short", "http500", "rpcerror", "foreign", "huge",
            "notjson", "odd", "html", "nocard", "raw")
BIGTEXT_PIECE = "书" * 21_000  # about 64 KB
BIGTEXT_PIECES = 20
CUT_CHUNK = "说到一半"
RPC_ERROR_MESSAGE = "请求参数不对"
HOSTILE_NAME = "<script>alert('card')</script>"


def answer_chunks(message: str) -> list[str]:
    """The artifact pieces a normal answer streams; joined they are the tool result."""
    clean = MODE_PATTERN.sub("", message).strip()
    return ["A2A", "已收到：", clean or "（空）", "。"]


def rpc_frame(rpc_id, result: dict) -> str:
    """One JSON-RPC SSE frame of a streaming answer (`result`: a StreamResponse as JSON)."""
    return "data: " + json.dumps({"jsonrpc": "2.0", "id": rpc_id, "result": result}, ensure_ascii=False) + "\n\n"


def artifact_update(text: str, *, append: bool = True, task_id: str = "t-raw") -> dict:
    return {"artifactUpdate": {"taskId": task_id, "contextId": "c-raw", "append": append,
                               "artifact": {"artifactId": "a", "parts": [{"text": text}]}}}


def status_update(state: str, text: str = "", *, task_id: str = "t-raw") -> dict:
    status: dict = {"state": state}
    if text:
        status["message"] = {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": text}]}
    return {"statusUpdate": {"taskId": task_id, "contextId": "c-raw", "status": status}}


def mode_of(message: str) -> str:
    found = MODE_PATTERN.search(message or "")
    return found.group(1) if found else "normal"


@dataclass
class RecordedRequest:
    path: str
    headers: dict[str, str]


class _Executor(AgentExecutor):
    def __init__(self, agent: A2aTestAgent):
        self.agent = agent

    async def execute(self, context: RequestContext, event_queue) -> None:
        text = context.get_user_input()
        self.agent.messages.append(text)
        self.agent.metadata.append(context.metadata)
        mode = mode_of(text)
        waiting = context.current_task
        if waiting is not None and waiting.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            self.agent.continued.append((waiting.id, text))
            updater = TaskUpdater(event_queue, context.task_id, context.context_id)
            if mode == "input":
                await updater.requires_input(updater.new_agent_message([Part(text=INPUT_QUESTION)]))
            else:
                await updater.add_artifact([Part(text=INPUT_ANSWER.format(answer=text))], artifact_id="answer")
                await updater.complete()
            return
        if mode == "message":
            await event_queue.enqueue_event(new_text_message("".join(answer_chunks(text)), role=Role.ROLE_AGENT))
            return
        await event_queue.enqueue_event(Task(id=context.task_id, context_id=context.context_id,
                                             status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                                             history=[context.message]))
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        if mode == "slow":
            await asyncio.sleep(self.agent.stall_sec)
        await updater.start_work(updater.new_agent_message([Part(text=STATUS_TEXT)]))
        if mode == "failed":
            await updater.failed(updater.new_agent_message([Part(text=FAILED_MESSAGE)]))
        elif mode == "canceled":
            await updater.cancel(updater.new_agent_message([Part(text=AGENT_CANCELED_MESSAGE)]))
        elif mode == "input":
            await updater.requires_input(updater.new_agent_message([Part(text=INPUT_QUESTION)]))
        elif mode == "auth":
            await updater.requires_auth(updater.new_agent_message([Part(text=AUTH_DETAIL)]))
        elif mode == "bigtext":
            for index in range(BIGTEXT_PIECES):
                await updater.add_artifact([Part(text=BIGTEXT_PIECE)], artifact_id="answer", append=index > 0)
            await updater.complete()
        elif mode == "hang":
            await updater.add_artifact([Part(text=answer_chunks(text)[0])], artifact_id="answer")
            await asyncio.sleep(self.agent.stall_sec)
        else:
            for index, piece in enumerate(answer_chunks(text)):
                await asyncio.sleep(self.agent.chunk_delay)
                await updater.add_artifact([Part(text=piece)], artifact_id="answer", append=index > 0)
            await updater.complete()

    async def cancel(self, context: RequestContext, event_queue) -> None:
        self.agent.cancelled_tasks.append(context.task_id)
        self.agent.cancelled.set()
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


class A2aTestAgent(ServedApp):
    def __init__(self, *, chunk_delay: float = 0.02, stall_sec: float = 30.0):
        self.chunk_delay = chunk_delay
        self.stall_sec = stall_sec
        self._state_init()
        executor = _Executor(self)
        routes = []
        for variant in ("stream", "plain", "bearer", "garbage", "die", "short", "http500", "rpcerror",
                        "foreign", "raw"):
            card = self._card(variant)
            if variant in ("garbage", "die", "short", "http500", "rpcerror", "raw"):
                routes.append(Route(f"/{variant}/", getattr(self, f"_rpc_{variant}"), methods=["POST"]))
            else:
                handler = DefaultRequestHandler(agent_executor=executor, task_store=InMemoryTaskStore(),
                                                agent_card=card)
                routes += create_jsonrpc_routes(handler, rpc_url=f"/{variant}/")
            routes += create_agent_card_routes(card, card_modifier=self._card_for(variant),
                                               card_url=f"/{variant}/.well-known/agent-card.json")
        routes += [
            Route("/huge/.well-known/agent-card.json", self._card_huge),
            Route("/notjson/.well-known/agent-card.json", self._card_notjson),
            Route("/odd/.well-known/agent-card.json", self._card_odd),
            Route("/html/.well-known/agent-card.json", self._card_html),
        ]
        self.app = Starlette(routes=routes)
        self.app.add_middleware(_Recorder, agent=self)

    def _state_init(self) -> None:
        self.requests: list[RecordedRequest] = []
        self.messages: list[str] = []
        self.metadata: list[dict] = []  # each message send's request metadata
        self.cancelled_tasks: list[str] = []
        self.cancelled = threading.Event()
        self.continued: list[tuple[str, str]] = []  # (task id, text) of messages that went on an input-required task
        self.raw_bodies: dict = {}  # `[[mode:raw]] <key>` on the `raw` variant → what its endpoint streams

    def url(self, variant: str = "stream") -> str:
        """The base_url of a SubAgent row for one of the VARIANTS."""
        return f"{self.root_url}/{variant}"

    def rpc_requests(self, variant: str = "stream") -> list[RecordedRequest]:
        return [r for r in self.requests if r.path == f"/{variant}/"]

    @staticmethod
    def _card(variant: str) -> AgentCard:
        card = AgentCard(
            name="测试图书馆", description="测试用 A2A 图书馆助手", version="1.0.0",
            supported_interfaces=[AgentInterface(url="http://placeholder/", protocol_binding="JSONRPC",
                                                 protocol_version="1.0")],
            capabilities=AgentCapabilities(streaming=variant != "plain"),
            default_input_modes=["text/plain"], default_output_modes=["text/plain"], skills=[SKILL],
        )
        if variant == "bearer":
            card.security_schemes["campus"].CopyFrom(
                SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="Bearer"))
            )
        return card

    def _card_for(self, variant: str):
        async def modify(card: AgentCard) -> AgentCard:
            served = AgentCard()
            served.CopyFrom(card)
            # The port is known once the server runs; `foreign` points somewhere else entirely.
            url = "http://127.0.0.2:9/rpc" if variant == "foreign" else f"{self.root_url}/{variant}/"
            served.supported_interfaces[0].url = url
            return served

        return modify

    async def _card_huge(self, request: Request) -> Response:
        return JSONResponse({"name": "大", "description": "x" * 300_000, "supportedInterfaces": []})

    async def _card_notjson(self, request: Request) -> Response:
        return PlainTextResponse("<html>not a card</html>", media_type="text/html")

    async def _card_odd(self, request: Request) -> Response:
        return JSONResponse({"name": ["不是字符串"], "skills": "many", "capabilities": 7})

    async def _card_html(self, request: Request) -> Response:
        return JSONResponse({
            "name": HOSTILE_NAME, "description": "<b>粗体</b>", "version": "1",
            "supportedInterfaces": [{"url": f"{self.root_url}/html/", "protocolBinding": "JSONRPC"}],
            "capabilities": {"streaming": False, "unknownCapability": {"nested": [1, 2]}},
            "skills": [{"id": "x", "name": HOSTILE_NAME, "description": "<img src=x onerror=alert(1)>",
                        "examples": ["<i>例</i>"]}],
            "someFutureField": {"a": 1},
        })

    async def _rpc_garbage(self, request: Request) -> Response:
        async def frames():
            yield "data: this is not json\n\n"

        return StreamingResponse(frames(), media_type="text/event-stream")

    async def _rpc_die(self, request: Request) -> Response:
        body = await request.json()

        async def frames():
            update = {"artifactUpdate": {"taskId": "t-die", "contextId": "c-die",
                                         "artifact": {"artifactId": "a", "parts": [{"text": CUT_CHUNK}]}}}
            yield "data: " + json.dumps({"jsonrpc": "2.0", "id": body.get("id"), "result": update}) + "\n\n"
            await asyncio.sleep(0.05)
            raise ConnectionResetError("the A2A test agent drops the connection mid-stream")

        return StreamingResponse(frames(), media_type="text/event-stream")


    async def _rpc_short(self, request: Request) -> Response:
        body = await request.json()

        async def frames():
            update = {"statusUpdate": {"taskId": "t-short", "contextId": "c-short",
                                       "status": {"state": "TASK_STATE_WORKING"}}}
            yield "data: " + json.dumps({"jsonrpc": "2.0", "id": body.get("id"), "result": update}) + "\n\n"

        return StreamingResponse(frames(), media_type="text/event-stream")

    async def _rpc_raw(self, request: Request) -> Response:
        body = await request.json()
        if body.get("method") not in ("SendStreamingMessage", "SendMessage", "message/stream", "message/send"):
            # A tasks/cancel after a cut call: there is no task here to cancel.
            return JSONResponse({"jsonrpc": "2.0", "id": body.get("id"),
                                 "error": {"code": -32001, "message": "task not found"}})
        text = "".join(part.get("text", "") for part in body.get("params", {}).get("message", {}).get("parts", []))
        script = self.raw_bodies[MODE_PATTERN.sub("", text).strip()]
        script = script(body.get("id")) if callable(script) else script

        async def frames():
            for piece in [script] if isinstance(script, bytes | str) else script:
                yield piece
                await asyncio.sleep(0)

        return StreamingResponse(frames(), media_type="text/event-stream")

    async def _rpc_http500(self, request: Request) -> Response:
        return JSONResponse({"error": "internal"}, status_code=500)


    async def _rpc_rpcerror(self, request: Request) -> Response:
        body = await request.json()
        return JSONResponse({"jsonrpc": "2.0", "id": body.get("id"),
                             "error": {"code": -32602, "message": RPC_ERROR_MESSAGE}})


class _Recorder:
    """ASGI middleware: records each request's path and headers (the body is left alone)."""

    def __init__(self, app, agent: A2aTestAgent):
        self.app = app
        self.agent = agent

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
            self.agent.requests.append(RecordedRequest(path=scope["path"], headers=headers))
        await self.app(scope, receive, send)
