"""The model client's sharded connection pools (agents_app/runtime/model_transport.py), against
the scripted model over real sockets."""
import asyncio
import socket
import threading

import httpx2
import pytest

from agents_app.runtime import model_transport
from agents_app.runtime.llm import llm_client, llm_stream
from agents_app.runtime.model_transport import ShardedTransport
from testkit.model.fake_llm import Reply


def _transport() -> ShardedTransport:
    transport = llm_client()._client._transport  # the SDK's http client, httpx's attribute
    assert isinstance(transport, ShardedTransport)
    return transport


async def _open(**kwargs):
    return await llm_stream(model="fake-model", messages=[{"role": "user", "content": "hi"}], tools=None,
                            temperature=0.3, request_id="0123456789abcdef", **kwargs)


async def test_streams_beyond_a_shard_go_to_the_next_and_give_their_place_back(llm_settings):
    """40 streams open at once: the first 32 in the first pool, 8 in a second; each gives its place
    back when it is closed, read to the end or not, and the next request reuses a kept connection."""
    release = threading.Event()
    count = model_transport.SHARD_STREAMS + 8
    llm_settings.queue(*[Reply(text=f"第{i}个回答", hold_after_chunks=1, release=release) for i in range(count)])
    streams = await asyncio.gather(*(_open() for _ in range(count)))
    transport = _transport()
    try:
        assert transport.in_flight == (model_transport.SHARD_STREAMS, 8)
        release.set()
        texts = []
        for stream in streams[:-1]:
            chunks = [chunk async for chunk in stream]
            texts.append("".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices")))
        # each stream its own whole answer (the server took the requests in the order they came)
        assert len(set(texts)) == count - 1 and set(texts) <= {f"第{i}个回答" for i in range(count)}
    finally:
        release.set()
        for stream in streams:
            await stream.close()  # the last one left unread: closed mid-answer
    assert transport.in_flight == (0, 0)
    assert transport.pools_open == 1  # the second pool closed with its last stream
    peers = {request.peer for request in llm_settings.requests}
    assert len(peers) == count

    llm_settings.reply_text("再问一次")
    stream = await _open()
    try:
        assert [chunk async for chunk in stream]
    finally:
        await stream.close()
    assert llm_settings.last_request.peer in peers  # a kept-alive connection served it
    assert transport.in_flight == (0, 0)


async def test_a_quiet_workers_connections_are_all_kept_alive(llm_settings):
    """Ten streams at once, then ten more: the second ten reuse the first ten's connections, as
    one pool of the SDK's would (it keeps up to 100 alive)."""
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
    assert _transport().in_flight == (0,)


async def test_a_request_that_fails_gives_its_place_back(llm_settings):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    transport = ShardedTransport(shard_streams=2, max_connections=4)
    async with httpx2.AsyncClient(transport=transport) as client:
        with pytest.raises(httpx2.ConnectError):
            await client.get(f"http://127.0.0.1:{port}/v1/models")
    assert transport.in_flight == (0,)


async def test_when_every_shard_is_full_a_request_waits_in_the_least_busy_one(llm_settings):
    """Two shards of two: the fifth request queues for a connection in a full pool, as it would
    in one pool at the SDK's limit, and is served as soon as a stream there ends."""
    release = threading.Event()
    llm_settings.queue(*[Reply(text=f"答{i}", hold_after_chunks=1, release=release) for i in range(5)])
    transport = ShardedTransport(shard_streams=2, max_connections=4)
    url = f"{llm_settings.url}/chat/completions"
    body = {"model": "fake-model", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    async with httpx2.AsyncClient(transport=transport, timeout=10) as client:
        responses = [await client.send(client.build_request("POST", url, json=body), stream=True)
                     for _ in range(4)]
        assert transport.in_flight == (2, 2)
        fifth = asyncio.ensure_future(client.send(client.build_request("POST", url, json=body), stream=True))
        await asyncio.sleep(0.2)
        assert not fifth.done() and len(llm_settings.requests) == 4 and transport.in_flight == (3, 2)
        release.set()
        await responses[0].aread()
        await responses[0].aclose()
        served = await asyncio.wait_for(fifth, 10)
        assert served.status_code == 200 and "答4" in (await served.aread()).decode()
        for response in [*responses[1:], served]:
            await response.aread()
            await response.aclose()
        assert transport.in_flight == (0, 0) and transport.pools_open == 1
