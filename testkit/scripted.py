"""A scripted HTTP double's common part (testkit/moderation_server.py, testkit/embeddings_server.py):
each request is recorded (`requests`, `asked`, `last_request`) and answered with the next scripted
answer, or the default one when the script is empty; the reset between tests clears both."""

from __future__ import annotations

import asyncio
import json
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any, ClassVar

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from testkit.servers import ServedApp

UNSET = object()
GARBAGE_BODY = b"<html><body><h1>502 Bad Gateway</h1></body></html>"


@dataclass
class ScriptedRequest:
    path: str
    body: Any  # the JSON body, or None when it was not JSON
    headers: dict[str, str]  # lower-case names


class ScriptedApp(ServedApp):
    """`answer_type` is a dataclass with (at least) `hang`, `status`, `body`, `content_type` and
    `json_value` (default UNSET); `answer_type()` is the default answer."""

    answer_type: ClassVar[type]

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state_init()

    def _state_init(self) -> None:
        self.requests: list[ScriptedRequest] = []
        self.asked = threading.Event()
        self._script: deque = deque()

    @property
    def url(self) -> str:
        """The base URL a client is configured with, ending in /v1."""
        return f"{self.root_url}/v1"

    @property
    def last_request(self) -> ScriptedRequest:
        return self.requests[-1]

    # --- scripting ----------------------------------------------------------------------------
    def queue(self, *answers):
        with self._lock:
            self._script.extend(answers)
        return self

    def hang(self):
        return self.queue(self.answer_type(hang=True))

    def garbage(self, body: bytes = GARBAGE_BODY, content_type: str = "text/html"):
        return self.queue(self.answer_type(body=body, content_type=content_type))

    def fail(self, status: int = 500):
        return self.queue(self.answer_type(status=status))

    def raw(self, value: Any):
        return self.queue(self.answer_type(json_value=value))

    # --- answering ----------------------------------------------------------------------------
    async def _next(self, request: Request) -> tuple[Any, Any]:
        """Records the request; returns its JSON body (or None) and the answer to give it, after
        waiting forever for a `hang` (the client's timeout, or the reset, ends it)."""
        try:
            body = json.loads(await request.body())
        except ValueError:
            body = None
        self.requests.append(ScriptedRequest(path=request.url.path, body=body,
                                             headers={k.lower(): v for k, v in request.headers.items()}))
        self.asked.set()
        with self._lock:
            answer = self._script.popleft() if self._script else self.answer_type()
        if answer.hang:
            await asyncio.sleep(3600)
        return body, answer


def scripted_response(answer, error_message: str) -> Response | None:
    """The answer's own response when it has one: an HTTP error, exact bytes or a JSON value."""
    if answer.status != 200:
        return JSONResponse({"error": {"message": error_message, "type": "server_error"}}, status_code=answer.status)
    if answer.body is not None:
        return Response(answer.body, media_type=answer.content_type)
    if answer.json_value is not UNSET:
        return JSONResponse(answer.json_value)
    return None
