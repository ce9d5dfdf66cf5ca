"""A rerank server for tests: the Jina/Cohere rerank API (`POST /v1/rerank`, and DashScope's name
for it, `/v1/reranks`) on loopback, scoring each document by the character bigrams it shares with
the query — a real relevance score, crude but deterministic, so an order truly changes: a passage
that repeats the question's words comes first whatever the indexes thought.

Script it per test with a queue of answers (`hang`, `garbage`, `fail`, `huge`, `raw`,
`index_out_of_range`, `index_twice`, `too_few`, `reversed_scores`), or leave it empty: an
unscripted request gets the real scores, best first, `top_n` of them. Every request is recorded
in `.requests` (path, JSON body, headers), and `.asked` (a threading.Event) is set when one
arrives, so a test waits on it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from testkit.scripted import UNSET, ScriptedApp, scripted_response


def bigrams(text: str) -> set[str]:
    """The text's pairs of adjacent characters, spaces and punctuation dropped."""
    kept = [c for c in text if c.isalnum()]
    return {a + b for a, b in zip(kept, kept[1:], strict=False)}


def relevance(query: str, document: str) -> float:
    """The share of the query's bigrams found in the document, from 0 to 1."""
    asked = bigrams(query)
    return len(asked & bigrams(document)) / len(asked) if asked else 0.0


@dataclass
class RerankAnswer:
    """One answer of the server.

    - `index_shift`: the first result's index moved by this much (out of range, or onto another's);
    - `drop`: that many results fewer than asked;
    - `reverse_scores`: the worst document scored best;
    - `json_value`: the whole answer, any JSON value; `body`: its exact bytes;
    - `status`: an HTTP error with a JSON error body that quotes the query;
    - `hang`: never answer (the client's timeout, or the reset between tests, ends it).
    """

    index_shift: int | None = 0  # None: the first result takes the last one's index
    drop: int = 0
    reverse_scores: bool = False
    json_value: Any = UNSET
    body: bytes | None = None
    status: int = 200
    hang: bool = False
    content_type: str = "application/json"


class FakeRerank(ScriptedApp):
    answer_type = RerankAnswer

    def __init__(self) -> None:
        super().__init__()
        self.app = Starlette(routes=[Route("/v1/rerank", self._rerank, methods=["POST"]),
                                     Route("/v1/reranks", self._rerank, methods=["POST"])])

    # --- scripting (queue, hang, garbage, fail, raw: testkit.scripted) -------------------------
    def index_out_of_range(self) -> FakeRerank:
        return self.queue(RerankAnswer(index_shift=1000))

    def index_twice(self) -> FakeRerank:
        return self.queue(RerankAnswer(index_shift=None))

    def too_few(self, drop: int = 1) -> FakeRerank:
        return self.queue(RerankAnswer(drop=drop))

    def reversed_scores(self) -> FakeRerank:
        return self.queue(RerankAnswer(reverse_scores=True))

    def huge(self, size: int = 4 * 1024 * 1024) -> FakeRerank:
        """A well-formed answer padded past any sane cap."""
        return self.queue(RerankAnswer(body=b'{"pad": "' + b"x" * size + b'", "results": []}'))

    # --- the endpoint -------------------------------------------------------------------------
    async def _rerank(self, request: Request) -> Response:
        body, answer = await self._next(request)
        query = body.get("query") if isinstance(body, dict) else None
        documents = body.get("documents") if isinstance(body, dict) else None
        # As some servers do, an error quotes the query (the client must not pass it on).
        if (scripted := scripted_response(answer, f"scripted status {answer.status} for {query!r}")) is not None:
            return scripted
        top_n = body.get("top_n", len(documents or ())) if isinstance(body, dict) else None
        if not isinstance(query, str) or not isinstance(documents, list) or not documents \
                or not all(isinstance(d, str) for d in documents) or type(top_n) is not int or top_n < 1:
            return JSONResponse({"error": {"message": "query: a string; documents: strings; top_n ≥ 1",
                                           "type": "invalid_request_error"}}, status_code=400)
        scores = [relevance(query, document) for document in documents]
        if answer.reverse_scores:
            scores = [1.0 - score for score in scores]
        order = sorted(range(len(documents)), key=lambda i: -scores[i])[:top_n]
        results = [{"index": i, "document": {"text": documents[i]}, "relevance_score": scores[i]} for i in order]
        if answer.drop:
            results = results[:-answer.drop]
        if answer.index_shift is None:
            results[0]["index"] = results[-1]["index"]
        elif answer.index_shift:
            results[0]["index"] += answer.index_shift
        tokens = sum(len(d) for d in documents) + len(query) * len(documents)
        return JSONResponse({"id": "rerank-test", "model": body.get("model", ""), "results": results,
                             "usage": {"total_tokens": tokens}})
