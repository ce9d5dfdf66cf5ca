"""httpx clients for calls whose answers the caller caps and times itself — the moderation model
(safety_app.model_check), the embeddings and the reranker (knowledge_app.provider_http) — one per
event loop, since a client's connection pool is bound to the loop that opened its connections."""

import asyncio
import weakref

import httpx


def capped_client_new() -> httpx.AsyncClient:
    # No httpx timeout: each request's own deadline covers it all. Identity: a compressed answer
    # would be inflated past the cap before it is counted.
    return httpx.AsyncClient(timeout=httpx.Timeout(None), follow_redirects=False,
                             headers={"Accept-Encoding": "identity"})


class LoopClients:
    """The running loop's client, made (again, once closed) when asked for."""

    def __init__(self) -> None:
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
            weakref.WeakKeyDictionary()
        )

    def get(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None or client.is_closed:
            client = self._clients[loop] = capped_client_new()
        return client
