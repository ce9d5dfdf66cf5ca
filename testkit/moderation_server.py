"""A scripted OpenAI-compatible moderation server for tests: `POST /v1/moderations` and a guard
chat model's `POST /v1/chat/completions` (Qwen3Guard-Gen's answer format), on loopback.

Script it per test with a queue of answers (`flag`, `pass_`, `hang`, `garbage`, `fail`,
`huge`, `raw`, `guard`), or leave it empty: an unscripted request passes. Each answer is given in
the format of the endpoint asked. Every request is recorded in `.requests` (path, JSON body,
headers), and `.asked` (a threading.Event) is set when one arrives, so a test waits on it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from testkit.scripted import UNSET, ScriptedApp, scripted_response

# Qwen3Guard-Gen's category names (its model card).
GUARD_CATEGORIES = {"violence": "Violent", "politics": "Politically Sensitive Topics", "illicit": "Non-violent Illegal Acts"}


@dataclass
class ModerationAnswer:
    """One answer of the server.

    - `flagged` / `category`: the verdict, in the endpoint's format (`category` an OpenAI
      moderation category name; the guard model answers with its own name for it);
    - `level`: the guard model's level instead (`Safe`, `Unsafe`, `Controversial`);
    - `guard_text`: the guard model's exact text;
    - `json_value`: the whole answer, any JSON value (wrong shapes, wrong types);
    - `body`: the exact bytes of the answer (not JSON, HTML);
    - `status`: an HTTP error with a JSON error body;
    - `hang`: never answer (the client's timeout, or the reset between tests, ends it).
    """

    flagged: bool = False
    category: str = "violence"
    level: str | None = None
    guard_text: str | None = None
    json_value: Any = UNSET
    body: bytes | None = None
    status: int = 200
    hang: bool = False
    content_type: str = "application/json"


class FakeModeration(ScriptedApp):
    answer_type = ModerationAnswer

    def __init__(self) -> None:
        super().__init__()
        self.app = Starlette(routes=[
            Route("/v1/moderations", self._moderations, methods=["POST"]),
            Route("/v1/chat/completions", self._chat, methods=["POST"]),
        ])

    # --- scripting (queue, hang, garbage, fail, raw: testkit.scripted) -------------------------
    def flag(self, category: str = "violence") -> FakeModeration:
        return self.queue(ModerationAnswer(flagged=True, category=category))

    def pass_(self) -> FakeModeration:
        return self.queue(ModerationAnswer())

    def huge(self, size: int = 200 * 1024) -> FakeModeration:
        """A well-formed answer that passes, padded past any sane cap."""
        padded = {"results": [{"flagged": False, "categories": {}, "pad": "x" * size}],
                  "choices": [{"message": {"role": "assistant", "content": "Safety: Safe\n" + "x" * size}}]}
        return self.queue(ModerationAnswer(json_value=padded))

    def guard(self, text: str) -> FakeModeration:
        return self.queue(ModerationAnswer(guard_text=text))

    # --- handlers -----------------------------------------------------------------------------
    async def _answer(self, request: Request, endpoint: str) -> Response:
        body, answer = await self._next(request)
        if (scripted := scripted_response(answer, f"scripted status {answer.status}")) is not None:
            return scripted
        model = (body or {}).get("model", "") if isinstance(body, dict) else ""
        if endpoint == "moderations":
            return JSONResponse(_moderations_answer(answer, model))
        return JSONResponse(_chat_answer(answer, model))

    async def _moderations(self, request: Request) -> Response:
        return await self._answer(request, "moderations")

    async def _chat(self, request: Request) -> Response:
        return await self._answer(request, "chat")


def _moderations_answer(answer: ModerationAnswer, model: str) -> dict:
    """OpenAI's shape: every category named, the flagged ones true."""
    names = ("harassment", "hate", "illicit", "self-harm", "sexual", "violence", answer.category)
    categories = {name: answer.flagged and name == answer.category for name in names}
    scores = {name: 0.9 if hit else 0.001 for name, hit in categories.items()}
    return {"id": "modr-test", "model": model,
            "results": [{"flagged": answer.flagged, "categories": categories, "category_scores": scores}]}


def _chat_answer(answer: ModerationAnswer, model: str) -> dict:
    if answer.guard_text is not None:
        text = answer.guard_text
    else:
        level = answer.level or ("Unsafe" if answer.flagged else "Safe")
        category = GUARD_CATEGORIES.get(answer.category, answer.category) if level != "Safe" else "None"
        text = f"Safety: {level}\nCategories: {category}"
    return {"id": "chatcmpl-guard", "object": "chat.completion", "model": model,
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 8, "total_tokens": 18}}
