"""An OpenAI-compatible embeddings server for tests: `POST /v1/embeddings` on loopback, computing
real vectors with WordLlama (its wheel carries a 256-dimension model: nothing is downloaded).
Its Chinese is weak, so it proves the plumbing (request, answer, storage, nearest neighbour), not
retrieval quality.

Script it per test with a queue of answers (`hang`, `garbage`, `fail`, `wrong_count`,
`wrong_dimensions`, `huge`, `raw`, `reversed_`), or leave it empty: an unscripted request gets
the real vectors. A request's `dimensions` (≤ 256) is honoured as WordLlama's Matryoshka
truncation. Every request is recorded in `.requests` (path, JSON body, headers), and `.asked` (a
threading.Event) is set when one arrives, so a test waits on it.
"""
from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from testkit.scripted import UNSET, ScriptedApp, scripted_response

MODEL_DIMENSIONS = 256
_model_lock = threading.Lock()
_model = None


def wordllama_model():
    """WordLlama's model from its own wheel, loaded once per process. (WordLlama 0.4 looks for its
    tokenizer in a `tokenizer/` folder while its wheel has `tokenizers/`: naming the package's
    folder as the cache finds both files there, and no download is ever tried.)"""
    global _model
    with _model_lock:
        if _model is None:
            import wordllama

            _model = wordllama.WordLlama.load(cache_dir=Path(wordllama.__file__).parent, disable_download=True)
        return _model


def embed(texts: list[str], dimensions: int = MODEL_DIMENSIONS) -> np.ndarray:
    """The vectors the server answers for `texts` (float32, unit length)."""
    vectors = wordllama_model().embed(texts, norm=False)[:, :dimensions].astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


@dataclass
class EmbeddingsAnswer:
    """One answer of the server.

    - `count_delta`: that many vectors more (or fewer) than inputs;
    - `dimensions`: vectors of this length instead (zero-padded or cut);
    - `reverse`: the items in reverse order, each with its right `index`;
    - `json_value`: the whole answer, any JSON value; `body`: its exact bytes;
    - `status`: an HTTP error with a JSON error body that quotes the input;
    - `hang`: never answer (the client's timeout, or the reset between tests, ends it).
    """

    count_delta: int = 0
    dimensions: int | None = None
    reverse: bool = False
    json_value: Any = UNSET
    body: bytes | None = None
    status: int = 200
    hang: bool = False
    content_type: str = "application/json"


class FakeEmbeddings(ScriptedApp):
    answer_type = EmbeddingsAnswer

    def __init__(self) -> None:
        super().__init__()
        wordllama_model()  # loaded before the first request, not during a test's timeout
        self.app = Starlette(routes=[Route("/v1/embeddings", self._embeddings, methods=["POST"])])

    # --- scripting (queue, hang, garbage, fail, raw: testkit.scripted) -------------------------
    def wrong_count(self, delta: int = -1) -> FakeEmbeddings:
        return self.queue(EmbeddingsAnswer(count_delta=delta))

    def wrong_dimensions(self, dimensions: int) -> FakeEmbeddings:
        return self.queue(EmbeddingsAnswer(dimensions=dimensions))

    def reversed_(self) -> FakeEmbeddings:
        return self.queue(EmbeddingsAnswer(reverse=True))

    def huge(self, size: int = 1024 * 1024) -> FakeEmbeddings:
        """A well-formed answer padded past any sane cap."""
        return self.queue(EmbeddingsAnswer(body=b'{"pad": "' + b"x" * size + b'", "data": []}'))

    # --- the endpoint -------------------------------------------------------------------------
    async def _embeddings(self, request: Request) -> Response:
        body, answer = await self._next(request)
        texts = body.get("input") if isinstance(body, dict) else None
        if isinstance(texts, str):
            texts = [texts]
        # As some servers do, an error quotes the input (the client must not pass it on).
        if (scripted := scripted_response(answer, f"scripted status {answer.status} for {texts!r}")) is not None:
            return scripted
        dimensions = body.get("dimensions") or MODEL_DIMENSIONS
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts) \
                or not isinstance(dimensions, int) or not 1 <= dimensions <= MODEL_DIMENSIONS:
            return JSONResponse({"error": {"message": "input: a list of strings; dimensions ≤ 256",
                                           "type": "invalid_request_error"}}, status_code=400)
        vectors = await asyncio.to_thread(embed, texts, dimensions)
        if answer.dimensions is not None:
            vectors = np.pad(vectors, ((0, 0), (0, max(0, answer.dimensions - dimensions))))[:, :answer.dimensions]
        items = [{"object": "embedding", "index": i, "embedding": v.tolist()} for i, v in enumerate(vectors)]
        if answer.count_delta < 0:
            items = items[:answer.count_delta]
        items += [dict(items[-1], index=len(items) + i) for i in range(answer.count_delta)]
        if answer.reverse:
            items.reverse()
        tokens = sum(len(t) for t in texts)
        return JSONResponse({"object": "list", "data": items, "model": body.get("model", ""),
                             "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})
