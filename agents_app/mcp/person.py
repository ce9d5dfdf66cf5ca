"""Who answers for the calling task when an MCP server needs a person: a student's authorization
of a per-student service (oauth.py) and an elicitation, a server asking the user for input
(notifications.py).

Whoever makes the calls (a turn's MCP tool, the conformance client) sets the person with
`person_use`; the SDK runs the authorization flow and the elicitation callback in a copy of the
calling task's context, so the person of the call that needs one is the one asked. With no person
at hand, or one who does not answer authorization pages themselves (a turn's: the student is not
at hand mid-call), an authorization ends the opening with the URL the student must visit
(McpAuthorizationRequired); with no person, an elicitation is declined, so the server hears a
clear no.

A turn's person (`TurnPerson`) cannot ask the student mid-call either: the run then waits for the
student (chat_app.runs.wait) and the call runs again once they answered. So it notes the
first question not answered yet and tells the server "cancel"; on the call's next run it hands
each question, in the order they come, the answer the student gave to it.
"""
from __future__ import annotations

import contextvars
import json
from contextlib import contextmanager
from typing import Protocol

import mcp_types as types
from mcp.shared.auth import AuthorizationCodeResult


class McpPerson(Protocol):
    async def elicit(self, params: types.ElicitRequestParams) -> types.ElicitResult:
        """The person's answer to a server's question (form or URL mode)."""


class McpAuthorizingPerson(McpPerson, Protocol):
    """A person at hand who answers an authorization server's page themselves (the conformance
    client's headless one)."""

    async def authorization_redirect(self, authorization_url: str) -> None:
        """Send the person to the authorization server's page."""

    async def authorization_callback(self) -> AuthorizationCodeResult:
        """What that page sent back: the code, the state and the issuer."""


_person: contextvars.ContextVar[McpPerson | None] = contextvars.ContextVar("mcp_person", default=None)


@contextmanager
def person_use(person: McpPerson):
    """Within the block (and the tasks it starts), `person` answers what MCP servers ask."""
    token = _person.set(person)
    try:
        yield person
    finally:
        _person.reset(token)


def person_now() -> McpPerson | None:
    return _person.get()


def person_authorizing() -> McpAuthorizingPerson | None:
    """The calling task's person when they answer authorization pages themselves, else None."""
    person = _person.get()
    return person if hasattr(person, "authorization_redirect") else None


MAX_QUESTIONS_PER_CALL = 5  # the questions one call may wait for; past them the server hears "cancel"
MAX_QUESTION_MESSAGE = 2000  # characters of a question's text the student is shown
MAX_QUESTION_SCHEMA_BYTES = 32 * 1024  # a form's schema as JSON; a larger one is declined
MAX_QUESTION_URL = 2048


class TurnPerson:
    """A student's turn (runtime/mcp_tool.py): `answers` are what the student answered this call's
    earlier questions ({"action", "content"}, in the order asked); `asked` the first question with
    no answer yet, which the turn waits for (None: the call's result stands). A question that
    cannot be shown (a schema over MAX_QUESTION_SCHEMA_BYTES, a URL that is not http(s)) is
    declined instead of asked."""

    def __init__(self, answers: tuple[dict, ...] = ()):
        self.answers = answers
        self.asked: types.ElicitRequestParams | None = None
        self._questions = 0

    async def elicit(self, params: types.ElicitRequestParams) -> types.ElicitResult:
        index, self._questions = self._questions, self._questions + 1
        if index < len(self.answers):
            answer = self.answers[index]
            return types.ElicitResult(action=answer.get("action", "cancel"), content=answer.get("content"))
        if not question_showable(params):
            return types.ElicitResult(action="decline")
        if self.asked is None and index < MAX_QUESTIONS_PER_CALL:
            self.asked = params
        return types.ElicitResult(action="cancel")  # for now: the student answers, then the call runs again


def question_showable(params: types.ElicitRequestParams) -> bool:
    if getattr(params, "mode", None) == "url":
        url = getattr(params, "url", "") or ""
        return len(url) <= MAX_QUESTION_URL and url.lower().startswith(("https://", "http://"))
    schema = getattr(params, "requested_schema", None) or {}
    return len(json.dumps(schema, ensure_ascii=False).encode()) <= MAX_QUESTION_SCHEMA_BYTES
