"""The demo A2A agent: 图书馆助手, library opening hours, built with a2a-sdk's server side.

Served by this same server (campus_agent/asgi.py mounts `library_app` at LIBRARY_PATH when
DEMO_ENABLED is on), as the demo seed-contract sub-agents are under /demo/subagents/:

    GET  /demo/subagents/library/.well-known/agent-card.json   the Agent Card (streaming, no auth)
    POST /demo/subagents/library/                              JSON-RPC: SendMessage,
                                                               SendStreamingMessage, CancelTask …

It answers in Chinese, streaming a status line and then the answer sentence by sentence as
artifact chunks. The card's JSON-RPC URL is built from the request's own origin, so it is right
whatever host and port the server runs at.
"""
from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Part, Task, TaskState, TaskStatus
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

LIBRARY_NAME = "library"
LIBRARY_PATH = f"/demo/subagents/{LIBRARY_NAME}"
LIBRARY_DISPLAY = "图书馆助手"
LIBRARY_EXAMPLES = "图书馆今天几点关门？\n周末图书馆开门吗？"
# What `load_demo` registers for the model to read (staff leaving it empty in admin would get one
# made from the card's skill instead).
LIBRARY_DESCRIPTION = (
    "图书馆助手（演示 A2A）：查询总馆、东区分馆、医学分馆在工作日和周末的开放时间，以及考试周、节假日安排。"
    "关键词：图书馆、开放时间、几点开门、几点关门、闭馆、自习、周末、分馆。"
    "Keywords: library, open, opening, close, closing, hour, study, weekend, branch."
)
WORKING_TEXT = "正在查询图书馆开放时间…"
# A short pause between chunks, so the page shows the answer streaming in as a real one would.
CHUNK_DELAY_SEC = 0.05


@dataclass(frozen=True, slots=True)
class Branch:
    name: str
    keywords: tuple[str, ...]
    weekdays: str
    weekends: str
    note: str


BRANCHES = (
    Branch("总馆", ("总馆", "主馆", "图书馆"), "8:00–22:30", "9:00–21:00", "自习区考试周延长至 23:30"),
    Branch("东区分馆", ("东区", "分馆"), "8:00–21:00", "9:00–17:00", "周一上午闭馆整理"),
    Branch("医学分馆", ("医学",), "8:30–22:00", "8:30–22:00", "节假日另行通知"),
)
HOLIDAY_TEXT = "法定节假日开放时间以图书馆公告为准。"

SKILL = AgentSkill(
    id="library-hours",
    name="图书馆开放时间",
    description="查询总馆、东区分馆、医学分馆在工作日和周末的开放时间，以及考试周、节假日安排。",
    tags=["图书馆", "开放时间", "几点开门", "几点关门", "自习"],
    examples=["图书馆今天几点关门？", "周末图书馆开门吗？", "医学分馆几点开门？"],
)
CARD = AgentCard(
    name="图书馆助手（演示 A2A）",
    description="校园图书馆开放时间查询（A2A 协议演示）。",
    version="1.0.0",
    supported_interfaces=[AgentInterface(url="http://placeholder/", protocol_binding="JSONRPC",
                                         protocol_version="1.0")],
    capabilities=AgentCapabilities(streaming=True),
    default_input_modes=["text/plain"],
    default_output_modes=["text/plain"],
    skills=[SKILL],
)


def library_answer_parts(question: str) -> list[str]:
    """The answer, in the sentences it streams: the branches the question names (all when none)."""
    named = [b for b in BRANCHES[1:] if any(k in question for k in b.keywords)]
    branches = named or list(BRANCHES)
    parts = [f"{b.name}：工作日 {b.weekdays}，周末 {b.weekends}（{b.note}）。\n" for b in branches]
    return [*parts, HOLIDAY_TEXT]


class LibraryExecutor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue) -> None:
        question = context.get_user_input()
        await event_queue.enqueue_event(Task(id=context.task_id, context_id=context.context_id,
                                             status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                                             history=[context.message]))
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.start_work(updater.new_agent_message([Part(text=WORKING_TEXT)]))
        for index, part in enumerate(library_answer_parts(question)):
            await asyncio.sleep(CHUNK_DELAY_SEC)
            await updater.add_artifact([Part(text=part)], artifact_id="answer", name="开放时间", append=index > 0)
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue) -> None:
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


async def _card(request: Request) -> JSONResponse:
    card = AgentCard()
    card.CopyFrom(CARD)
    origin = f"{request.url.scheme}://{request.url.netloc}"
    card.supported_interfaces[0].url = f"{origin}{LIBRARY_PATH}/"
    return JSONResponse(agent_card_to_dict(card))


@functools.cache
def library_app() -> Starlette:
    """The ASGI app (built on first use: a deployment without the demo never builds it)."""
    handler = DefaultRequestHandler(agent_executor=LibraryExecutor(), task_store=InMemoryTaskStore(),
                                    agent_card=CARD)
    return Starlette(routes=[
        Route(LIBRARY_PATH + AGENT_CARD_WELL_KNOWN_PATH, _card, methods=["GET"]),
        *create_jsonrpc_routes(handler, rpc_url=f"{LIBRARY_PATH}/"),
    ])

