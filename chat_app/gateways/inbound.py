"""One turn for a client that speaks another protocol (docs/design.md#other-clients): the OpenAI-compatible API,
the MCP server, the A2A server. Each adapter turns its request into a `ChatInput`, starts the turn
here, and maps the run's frames (the chat stream's frames as dicts, `session` first, `done` last) onto its
own protocol. The turn is a run like any other: admitted with the same limits and quota, its
question stored before the model is called, its reply stored when it ends, followed through the
run bus (so any worker can serve it), stopped with `run_stop`.

    caller = await bearer_caller(token)                 # JWT or personal API key; 401 otherwise
    turn = await inbound_turn_start(caller=caller, chat=ChatInput(...), request_id=…)
    async for frame in turn.frames(): …                 # {"type": "chunk", "content": …} …
    await turn.stop()                                   # the client hung up / cancelled
"""
from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

from campus_agent.base import errors
from campus_agent.base.asyncdb import db_call
from chat_app.accounts.authentication import Caller, bearer_caller_resolve
from chat_app.models import Run
from chat_app.runs.chat_input import ChatInput
from chat_app.runs.engine import StopOutcome, run_start, run_stop
from chat_app.runs.follow import run_frames


async def bearer_caller(token: str | None) -> Caller:
    """The caller of an `Authorization: Bearer` token (a JWT or a personal API key). Raises
    ApiError 401 (token_missing / token_invalid)."""
    if token is None:
        raise errors.token_missing()
    return await db_call(bearer_caller_resolve, token=token)


PING = {"type": "ping"}  # a keep-alive, for `frames(pings=True)`: the run is silent, not gone


def frames_decoded(block: bytes | str, *, pings: bool = False) -> list[dict]:
    """The JSON payloads of SSE text (one or several `data:` frames; `: ping` comments skipped,
    or, with `pings`, given as PING)."""
    text = block.decode() if isinstance(block, bytes) else block
    payloads = []
    for line in text.split("\n"):
        if line.startswith("data: "):
            payloads.append(json.loads(line[6:]))
        elif pings and line == ": ping":
            payloads.append(PING)
    return payloads


@dataclass
class InboundTurn:
    run: Run

    @property
    def run_id(self) -> str:
        return str(self.run.id)

    @property
    def conversation_id(self) -> str:
        return str(self.run.conversation_id)

    @property
    def message_id(self) -> str:
        return str(self.run.message_id)

    async def frames(self, *, after: int = 0, pings: bool = False) -> AsyncIterator[dict]:
        """The run's frames, live, from `session` to `done` (keep-alive pings left out, or, with
        `pings`, given as PING every SSE_PING_SEC of silence: a protocol with its own keep-alive
        sends it then)."""
        async for block in run_frames(run=self.run, after=after):
            for payload in frames_decoded(block, pings=pings):
                yield payload

    async def stop(self, reason: str = "stop") -> StopOutcome:
        """Stops the run wherever it runs; the reply so far is stored as interrupted. `reason`:
        for the turn's log line (client_gone, cancelled …)."""
        return await run_stop(run=self.run, reason=reason)


async def inbound_turn_start(*, caller: Caller, chat: ChatInput, request_id: str) -> InboundTurn:
    """Admits the turn (429 streams / rate / quota, 404 conversation or agent, 400 …: ApiError)
    and starts its run here."""
    task = run_start(caller=caller, chat=chat, request_id=request_id)
    return InboundTurn(run=await asyncio.shield(task.opened))
