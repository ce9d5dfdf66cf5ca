"""Who answers for the calling task when an MCP server needs a person: a student's authorization
of a per-student service (oauth.py) and an elicitation, a server asking the user for input
(notifications.py).

Whoever makes the calls (a turn, the conformance client) sets the person with `person_use`; the
SDK runs the authorization flow and the elicitation callback in a copy of the calling task's
context, so the person of the call that needs one is the one asked. With no person at hand, an
authorization ends the opening with the URL the student must visit (McpAuthorizationRequired) and
an elicitation is declined, so the server hears a clear no.
"""
from __future__ import annotations

import contextvars
from contextlib import contextmanager
from typing import Protocol

import mcp_types as types
from mcp.shared.auth import AuthorizationCodeResult


class McpPerson(Protocol):
    async def authorization_redirect(self, authorization_url: str) -> None:
        """Send the person to the authorization server's page."""

    async def authorization_callback(self) -> AuthorizationCodeResult:
        """What that page sent back: the code, the state and the issuer."""

    async def elicit(self, params: types.ElicitRequestParams) -> types.ElicitResult:
        """The person's answer to a server's question (form or URL mode)."""


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
