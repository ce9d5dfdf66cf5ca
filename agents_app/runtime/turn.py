"""The one entry point chat_app uses to run a chat turn."""
from collections.abc import AsyncIterator
from contextlib import aclosing

from django.conf import settings
from django.utils.translation import gettext_lazy as _

from agents_app.models import Agent
from agents_app.runtime.context import RunContext
from agents_app.runtime.events import Done, Error, Event, Paused
from agents_app.runtime.fallback import fallback_turn
from agents_app.runtime.loop import DecidedCall, LlmUnavailable, resume_turn, run_turn
from campus_agent.base.errors import DOWNSTREAM

MODEL_UNAVAILABLE = _("AI 模型暂时不可用，请稍后重试。")


async def turn_stream(*, agent: Agent, history: list[dict], ctx: RunContext) -> AsyncIterator[Event | Paused]:
    """Runs one turn and yields its events; the last one is `Done`, or `Paused` when tool calls
    wait for approval (then `turn_resume_stream` goes on once they are decided).

    `history` is the OpenAI-format message list without the system prompt (the runtime puts the
    agent's prompt first), ending with the new user message.

    When the model is not configured or fails before the turn produced anything, the turn is
    answered by keyword routing (issue #6) if enabled, else with a 50003 error.
    """
    # Closing this stream closes the turn's own generators at once (their model stream and
    # running tools stop), not whenever they are garbage-collected.
    try:
        async with aclosing(run_turn(agent=agent, history=history, ctx=ctx)) as events:
            async for event in events:
                yield event
    except LlmUnavailable as exc:
        if settings.KEYWORD_FALLBACK_ENABLED:
            async with aclosing(fallback_turn(agent=agent, history=history, ctx=ctx, reason=str(exc))) as events:
                async for event in events:
                    yield event
        else:
            yield Error(DOWNSTREAM, MODEL_UNAVAILABLE)
            yield Done(full_text="", interrupted=True)


async def turn_resume_stream(
    *, agent: Agent, history: list[dict], ctx: RunContext, state: dict, decided: list[DecidedCall]
) -> AsyncIterator[Event | Paused]:
    """Goes on with a turn that paused for approval (loop.resume_turn); no keyword routing: the
    turn already spoke through the model."""
    async with aclosing(resume_turn(agent=agent, history=history, ctx=ctx, state=state, decided=decided)) as events:
        async for event in events:
            yield event
