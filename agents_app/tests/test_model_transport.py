"""The model client's HTTP (agents_app/runtime/model_transport.py): the SDK's aiohttp client,
its connections and its errors, against the scripted model over real sockets. How each failure
reaches the turn is test_llm_contract.py's."""
import asyncio
import socket
import threading

import httpx2
import openai
import pytest

from agents_app.runtime import model_transport
from agents_app.runtime.llm import llm_client, llm_stream
from agents_app.runtime.model_transport import model_http_client
from testkit.model.fake_llm import Reply


async def _open(**kwargs):
    return await llm_stream(model="fake-model", messages=[{"role": "user", "content": "hi"}], tools=None,
                            temperature=0.3, request_id="0123456789abcdef", **kwargs)


def _text(chunks: list[dict]) -> str:
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))


async def test_the_model_is_read_through_the_sdks_aiohttp_client(llm_settings):
    llm_settings.reply_text("一食堂今天有红烧肉")
    assert isinstance(llm_client()._client, openai.DefaultAioHttpClient)
    stream = await _open()
    try:
        assert _text([chunk async for chunk in stream]) == "一食堂今天有红烧肉"
    finally:
        await stream.close()


async def test_forty_streams_at_once_each_read_whole_then_their_connections_serve_again(llm_settings):
    """40 streams held open at once, each on its own connection with its own answer; closed (read
    to the end, or the last one mid-answer), their connections are kept for the next request."""
    release = threading.Event()
    count = 40
    llm_settings.queue(*[Reply(text=f"第{i}个回答", hold_after_chunks=1, release=release) for i in range(count)])
    streams = await asyncio.gather(*(_open() for _ in range(count)))
    try:
        assert len({request.peer for request in llm_settings.requests}) == count
        release.set()
        texts = []
        for stream in streams[:-1]:
            texts.append(_text([chunk async for chunk in stream]))
        # each stream its own whole answer (the server took the requests in the order they came)
        assert len(set(texts)) == count - 1 and set(texts) <= {f"第{i}个回答" for i in range(count)}
    finally:
        release.set()
        for stream in streams:
            await stream.close()  # the last one left unread
    peers = {request.peer for request in llm_settings.requests}

    llm_settings.reply_text("再问一次")
    stream = await _open()
    try:
        assert [chunk async for chunk in stream]
    finally:
        await stream.close()
    assert llm_settings.last_request.peer in peers  # a kept-alive connection served it


async def test_a_quiet_workers_connections_are_all_kept_alive(llm_settings):
    """Ten streams at once, then ten more: the second ten reuse the first ten's connections."""
    rounds = []
    for round_ in range(2):
        llm_settings.queue(*[Reply(text=f"第{round_}轮{i}") for i in range(10)])
        streams = await asyncio.gather(*(_open() for _ in range(10)))
        for stream in streams:
            try:
                assert [chunk async for chunk in stream]
            finally:
                await stream.close()
        rounds.append({request.peer for request in llm_settings.requests[-10:]})
    assert len(rounds[0]) == 10 and rounds[1] == rounds[0]


async def test_a_refused_connection_is_a_connect_error_and_a_slow_one_a_timeout(llm_settings):
    """What the SDK's adapter calls a ConnectTimeout for any aiohttp connection error is named
    as httpx names it: refused is ConnectError; a model that does not answer in time stays a timeout."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        refused = f"http://127.0.0.1:{probe.getsockname()[1]}/v1/models"
    async with model_http_client(timeout=5.0) as client:
        with pytest.raises(httpx2.ConnectError) as raised:
            await client.get(refused)
        assert not isinstance(raised.value, httpx2.TimeoutException)

        llm_settings.queue(Reply(text="迟到的回答", stall_sec=2.0))
        body = {"model": "fake-model", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        with pytest.raises(httpx2.TimeoutException):
            await client.post(f"{llm_settings.url}/chat/completions", json=body, timeout=0.3)


async def test_a_server_that_hangs_up_mid_answer_is_a_read_failure_not_a_timeout(llm_settings):
    llm_settings.queue(Reply(text="一食堂今天有红烧肉", chunk_size=3, drop_after_chunks=2))
    body = {"model": "fake-model", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    async with model_http_client(timeout=5.0) as client:
        async with client.stream("POST", f"{llm_settings.url}/chat/completions", json=body) as response:
            with pytest.raises(httpx2.TransportError) as raised:
                async for _ in response.aiter_bytes():
                    pass
    assert not isinstance(raised.value, httpx2.TimeoutException)


async def test_a_changed_providers_old_client_is_closed_after_the_turn_budget(llm_settings, settings, monkeypatch):
    settings.TURN_BUDGET_SEC = 0.05
    monkeypatch.setattr(model_transport, "CLOSE_AFTER_BUDGET_SEC", 0.0)
    old = llm_client()
    settings.LLM_TIMEOUT = 6.0  # another key: a new client replaces the old one
    new = llm_client()
    assert new is not old and not old.is_closed()
    async with asyncio.timeout(10):
        while not old.is_closed():  # closed by the loop's timer, a budget after the change
            await asyncio.sleep(0.01)
    assert not new.is_closed()
