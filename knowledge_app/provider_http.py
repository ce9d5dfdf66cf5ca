"""What the knowledge base's model services share on the wire (knowledge_app/embeddings.py,
knowledge_app/rerank.py): one JSON POST whose answer is read under a byte cap, every failure a
provider's own error with a message in Chinese (staff read it), and one httpx client per event
loop. What each service asks and how its answer is checked stays in its own module.

Nothing here logs a request's body or puts it in an error: it holds students' questions and the
documents' passages.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import httpx

from campus_agent.base.loop_clients import LoopClients


class ProviderError(Exception):
    """A model service failed or answered something unusable; the message says which."""


@dataclass(frozen=True)
class ProviderWords:
    """How one service's failures are told (each a format string), and the error they raise."""

    error: type[ProviderError]
    timeout: str  # {seconds}
    connect: str
    http_error: str  # {name}
    status: str  # {status}
    too_large: str  # {size} (KB)
    not_json: str


async def answer_post(client: httpx.AsyncClient, *, url: str, body: dict, api_key: str, cap: int,
                      words: ProviderWords) -> bytes:
    """The bytes of the answer to `body` POSTed as JSON to `url`; raises `words.error` on an
    HTTP status other than 200 or an answer past `cap` bytes (read no further)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    async with client.stream("POST", url, json=body, headers=headers) as response:
        if response.status_code != 200:
            # Not the body: a server may quote the input in its error.
            raise words.error(words.status.format(status=response.status_code))
        received = bytearray()
        async for piece in response.aiter_raw():
            received += piece
            if len(received) > cap:
                raise words.error(words.too_large.format(size=cap // 1024))
    return bytes(received)


def error_of(exc: Exception, *, words: ProviderWords, timeout_sec: float) -> ProviderError:
    """`exc`, raised while asking or reading, as the service's error."""
    if isinstance(exc, words.error):
        return exc
    if isinstance(exc, TimeoutError):
        return words.error(words.timeout.format(seconds=timeout_sec))
    if isinstance(exc, httpx.ConnectError):
        return words.error(words.connect)
    if isinstance(exc, httpx.HTTPError):
        return words.error(words.http_error.format(name=type(exc).__name__))
    return words.error(type(exc).__name__)


def _constant_refused(name: str):
    raise ValueError(name)


def json_read(body: bytes, *, words: ProviderWords) -> Any:
    """The answer's JSON; NaN and Infinity, which Python's json would accept, are refused."""
    try:
        return json.loads(body, parse_constant=_constant_refused)
    except ValueError:
        raise words.error(words.not_json) from None


def finite(x) -> bool:
    """A JSON number that is a finite float: not a bool, not a string, not 1e999."""
    try:
        return type(x) in (float, int) and math.isfinite(x)
    except OverflowError:  # an integer too large for a float
        return False


# --- clients --------------------------------------------------------------------------------------
loop_clients = LoopClients()  # the embeddings' and the reranker's, one per event loop
