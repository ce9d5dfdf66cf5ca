"""The one entry point chat_app uses to run a chat turn."""
from collections.abc import AsyncIterator

from agents_app.models import Agent
from agents_app.runtime.context import RunContext
from agents_app.runtime.events import Event


async def turn_stream(*, agent: Agent, history: list[dict], ctx: RunContext) -> AsyncIterator[Event]:
    """Runs one turn and yields its events; the last event is always `Done`.

    `history` is the OpenAI-format message list without the system prompt (the runtime puts the
    agent's prompt first), ending with the new user message.
    """
    raise NotImplementedError  # built in issue #3 (tool loop) and #6 (keyword fallback)
    yield  # pragma: no cover
