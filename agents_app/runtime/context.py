from dataclasses import dataclass
from typing import TYPE_CHECKING

from agents_app.access import EVERYONE, Audience

if TYPE_CHECKING:
    from safety_app.lists_cache import Matchers


@dataclass(frozen=True, slots=True)
class RunContext:
    """What a turn carries to every hop. The campus token is for sub-agents only (docs/design.md#cross-cutting-rules)."""

    request_id: str
    conversation_id: str
    user_id: int | None = None
    # Whose groups decide the turn's tools (agents_app.access): by default only what is open to all.
    audience: Audience = EVERYONE
    campus_token: str | None = None
    hint_domain: str | None = None
    language: str | None = None  # what the student reads (settings.LANGUAGES); the model answers in it
    # The turn's wall-clock deadline (event-loop time) set by whoever runs the turn; None: the
    # runtime starts TURN_BUDGET_SEC from its own start.
    deadline: float | None = None
    # Within one tool call (tool_runs.py): the student's answers to what the call's MCP server
    # asked when the call ran before the turn waited for them (elicitations), in the order asked.
    elicitation_answers: tuple[dict, ...] = ()
    # The moderation word lists as the turn's admission read them to check its question: the
    # turn's screens start from them (agents_app.runtime.screening.turn_screens), not from a
    # second read of their stamp on the way to the model. None: read when the turn starts.
    matchers: "Matchers | None" = None

    def __repr__(self) -> str:  # never print the campus token, whoever logs the context
        return f"RunContext(request_id={self.request_id!r}, conversation_id={self.conversation_id!r})"
