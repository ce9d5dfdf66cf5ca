"""The LLM client: URL normalisation, one reused client per endpoint, the stream read as dicts."""
import asyncio
import json
import threading

import openai
import pytest

from agents_app.runtime.llm import llm_base_url_normalise, llm_client, llm_stream
from testkit.model.fake_llm import STREAM_ERROR_MESSAGE, Reply, ScriptedCall


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("https://dashscope.aliyuncs.com/compatible-mode/v1", "https://dashscope.aliyuncs.com/compatible-mode/v1"),
        ("https://dashscope.aliyuncs.com/compatible-mode/v1/", "https://dashscope.aliyuncs.com/compatible-mode/v1"),
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000/v1"),
        ("http://127.0.0.1:8000/", "http://127.0.0.1:8000/v1"),
        ("http://llm.example.edu.cn/V1", "http://llm.example.edu.cn/V1"),
        ("http://llm.example.edu.cn/api", "http://llm.example.edu.cn/api/v1"),
    ],
)
def test_base_url_is_normalised(raw, expected):
    assert llm_base_url_normalise(raw) == expected


async def test_one_client_per_endpoint_is_reused(settings):
    settings.LLM_BASE_URL = "http://127.0.0.1:9/"
    settings.LLM_API_KEY = "k1"
    first = llm_client()
    assert llm_client() is first
    assert str(first.base_url).rstrip("/") == "http://127.0.0.1:9/v1"
    assert first.max_retries == 0 and first.timeout == settings.LLM_TIMEOUT
    settings.LLM_API_KEY = "k2"
    assert llm_client() is not first


@pytest.mark.django_db(transaction=True)
async def test_client_is_reused_across_turns_against_the_server(llm_settings, agent):
    from agents_app.runtime.context import RunContext
    from agents_app.runtime.loop import run_turn

    ctx = RunContext(request_id="0123456789abcdef", conversation_id="c")
    llm_settings.reply_text("一")
    llm_settings.reply_text("二")
    before = None
    for _ in range(2):
        [e async for e in run_turn(agent=agent, history=[{"role": "user", "content": "hi"}], ctx=ctx)]
        client = llm_client()
        assert before is None or client is before
        before = client
    assert len(llm_settings.requests) == 2


# Every shape of message and tool a turn sends (agents_app/runtime/loop.py, tool.py,
# chat_app/conversations/history.py).
TURN_MESSAGES = [
    {"role": "system", "content": "你是校园小智。"},
    {"role": "user", "content": "今天一食堂吃什么？"},
    {"role": "user", "content": [{"type": "text", "text": "这张课表"},
                                 {"type": "text", "text": "[图片 课表.png]"},
                                 {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]},
    {"role": "assistant", "content": None,
     "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "call_canteen", "arguments": '{"q": "菜单"}'}},
                    {"id": "call_2", "type": "function", "function": {"name": "add", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "红烧肉"},
    {"role": "tool", "tool_call_id": "call_2", "content": ""},
    {"role": "assistant", "content": "一食堂有红烧肉。"},
]
TURN_TOOLS = [
    {"type": "function", "function": {"name": "call_canteen", "description": "食堂助手：菜单、人数",
                                      "parameters": {"type": "object", "properties": {"q": {"type": "string"}},
                                                     "required": ["q"]}}},
    {"type": "function", "function": {"name": "add", "description": "",
                                      "parameters": {"type": "object", "additionalProperties": False,
                                                     "properties": {"a": {"type": "integer", "default": 1},
                                                                    "items": {"type": "array",
                                                                              "items": {"$ref": "#/$defs/x"}}},
                                                     "$defs": {"x": {"anyOf": [{"type": "string"}, {"type": "null"}]}}}}},
]


def test_the_sdks_walk_of_a_turns_messages_and_tools_gives_back_what_went_in():
    """llm_stream hands the messages and tools to the SDK in `extra_body`, which skips the walk
    create() makes of its typed arguments (for aliases and file fields): the walk, run here as
    create() runs it, would have changed none of them."""
    from openai._utils import maybe_transform
    from openai.types.chat.completion_create_params import CompletionCreateParamsStreaming

    params = {"model": "m", "messages": TURN_MESSAGES, "tools": TURN_TOOLS, "tool_choice": "auto", "stream": True}
    assert maybe_transform(params, CompletionCreateParamsStreaming) == params


async def test_the_request_carries_the_messages_tools_and_options_as_given(llm_settings):
    llm_settings.reply_text("好")
    stream = await llm_stream(model="fake-model", messages=TURN_MESSAGES, tools=TURN_TOOLS, temperature=0.3,
                              request_id="0123456789abcdef",
                              options={"extra_body": {"enable_thinking": True}, "reasoning_effort": "low"})
    try:
        assert [c async for c in stream]
    finally:
        await stream.close()
    recorded = llm_settings.requests[-1]
    assert recorded.body == {
        "model": "fake-model", "messages": TURN_MESSAGES, "tools": TURN_TOOLS, "tool_choice": "auto",
        "temperature": 0.3, "max_tokens": recorded.body["max_tokens"], "stream": True,
        "stream_options": {"include_usage": True}, "enable_thinking": True, "reasoning_effort": "low",
    }
    assert recorded.body["max_tokens"] > 0 and recorded.headers["x-request-id"] == "0123456789abcdef"


async def _read_all(**llm_kwargs) -> list[dict]:
    stream = await llm_stream(model="fake-model", messages=[{"role": "user", "content": "hi"}], tools=None,
                              temperature=0.3, request_id="0123456789abcdef", **llm_kwargs)
    try:
        return [chunk async for chunk in stream]
    finally:
        await stream.close()


@pytest.mark.parametrize("terse", [False, True])
async def test_stream_is_read_as_plain_dicts_whatever_the_framing(llm_settings, terse):
    # `data:` without the space, CRLF and comment lines are valid SSE some providers send.
    llm_settings.queue(Reply(text="一食堂有红烧肉", chunk_size=3, terse_frames=terse,
                             tool_calls=[ScriptedCall("add", {"a": 1}, id="call_1")]))
    chunks = await _read_all()
    assert all(type(chunk) is dict for chunk in chunks)
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert "".join(d.get("content") or "" for d in deltas) == "一食堂有红烧肉"
    fragments = [f for d in deltas for f in d.get("tool_calls") or ()]
    assert fragments[0]["id"] == "call_1" and fragments[0]["function"]["name"] == "add"
    assert json.loads("".join(f["function"]["arguments"] for f in fragments)) == {"a": 1}
    assert chunks[-1]["usage"]["completion_tokens"] > 0 and chunks[-1]["choices"] == []


async def test_error_chunk_inside_the_stream_raises_the_sdk_error(llm_settings):
    llm_settings.queue(Reply(text="一食堂有红烧肉", chunk_size=2, error_after_chunks=2))
    stream = await llm_stream(model="fake-model", messages=[{"role": "user", "content": "hi"}], tools=None,
                              temperature=0.3, request_id="0123456789abcdef")
    seen = []
    try:
        with pytest.raises(openai.APIError) as raised:
            async for chunk in stream:
                seen.append(chunk)
    finally:
        await stream.close()
    assert len(seen) == 2
    assert raised.value.message == STREAM_ERROR_MESSAGE and raised.value.body["type"] == "server_error"


async def test_a_200_answer_that_is_not_a_stream_raises_the_sdk_error(llm_settings):
    llm_settings.queue(Reply(text="好", error_as_json=True))
    with pytest.raises(openai.APIError, match="event stream"):
        await _read_all()


async def test_http_status_errors_are_still_mapped_by_the_sdk(llm_settings):
    llm_settings.fail(429)
    with pytest.raises(openai.RateLimitError):
        await _read_all()


async def test_connection_is_reused_after_done_and_released_on_early_close(llm_settings):
    release = threading.Event()  # the second answer stops after its first chunk until released
    llm_settings.reply_text("一")
    llm_settings.queue(Reply(text="二二二二二二二二", chunk_size=1, hold_after_chunks=1, release=release))
    llm_settings.reply_text("三")
    await _read_all()
    stream = await llm_stream(model="fake-model", messages=[{"role": "user", "content": "hi"}], tools=None,
                              temperature=0.3, request_id="0123456789abcdef")
    await stream.__anext__()
    await stream.close()  # left mid-answer: that connection is closed, not reused
    release.set()
    await _read_all()
    first, cut, third = (r.peer for r in llm_settings.requests)
    assert cut == first  # the body was read past [DONE], so the pooled connection served again
    assert third != cut


async def test_once_text_flows_the_body_is_read_at_most_every_read_gap(llm_settings):
    """A model streaming a chunk every 4 ms is read about every READ_GAP_SEC (several chunks per
    pass through the HTTP stack), the text whole and in order; the first read is not delayed."""
    from agents_app.runtime import llm

    pieces = [f"第{i}段。" for i in range(30)]
    llm_settings.reply_text("".join(pieces), chunk_size=len(pieces[0]), chunk_delay=0.004)
    stream = await llm_stream(model="fake-model", messages=[{"role": "user", "content": "hi"}], tools=None,
                              temperature=0.0, request_id="0123456789abcdef")
    try:
        chunks = [chunk async for chunk in stream]
    finally:
        await stream.close()
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))
    assert text == "".join(pieces)
    assert llm.READ_GAP_SEC > 0  # (pacing is off again at the end: test_pacing_stops_once_the_answer_finishes)
    assert stream._body.reads < len(pieces) / 2  # unpaced: a wait for the network per chunk


async def test_pacing_stops_once_the_answer_finishes(llm_settings):
    """The chunk with `finish_reason` ends the paced reading: the usage chunk and [DONE] after it
    are read as they come, so the end of the answer is not held back by READ_GAP_SEC."""
    llm_settings.reply_text("一二三四五六七八", chunk_size=1, chunk_delay=0.002)
    stream = await llm_stream(model="fake-model", messages=[{"role": "user", "content": "hi"}], tools=None,
                              temperature=0.0, request_id="0123456789abcdef")
    seen = []
    try:
        async for chunk in stream:
            choice = (chunk.get("choices") or [{}])[0]
            seen.append((bool(choice.get("delta", {}).get("content")), bool(choice.get("finish_reason")),
                         stream._body.pacing))
    finally:
        await stream.close()
    assert any(content and pacing for content, _, pacing in seen)  # paced while the text flowed
    finished = next(i for i, (_, finish, _) in enumerate(seen) if finish)
    assert all(not pacing for _, _, pacing in seen[finished:])  # and not from the finish on


async def test_a_paused_reader_reads_the_answers_end_as_soon_as_it_has_all_arrived(llm_settings, monkeypatch):
    """The pause between reads (READ_GAP_SEC) ends when the body is complete: the last text, the
    finish, the usage and [DONE] that came meanwhile are read at once, not a pause later (the
    answer's end was ≈ 20 ms late: issue 46). A pause of a minute here: the test ends only if
    the body's end cuts it short."""
    from agents_app.runtime import llm

    monkeypatch.setattr(llm, "READ_GAP_SEC", 60.0)
    release = threading.Event()
    # The role, then 一 after a wait for the network (pacing starts), then the rest once released.
    llm_settings.queue(Reply(text="一二三四", chunk_size=1, chunk_delay=0.05, hold_after_chunks=2, release=release))
    stream = await llm_stream(model="fake-model", messages=[{"role": "user", "content": "hi"}], tools=None,
                              temperature=0.3, request_id="0123456789abcdef")
    texts = []
    try:
        async with asyncio.timeout(20):
            async for chunk in stream:
                texts += [c["delta"]["content"] for c in chunk.get("choices") or [] if c["delta"].get("content")]
                if texts:  # text flows: the reader pauses after this piece, and the rest arrives meanwhile
                    release.set()
    finally:
        await stream.close()
    assert "".join(texts) == "一二三四"  # whole, within the test's timeout: the pause was cut short


async def test_a_body_that_breaks_off_during_the_pause_fails_as_a_connection_error(llm_settings, monkeypatch):
    """The model drops the connection while the reader pauses: the pause ends, and the next read
    raises the SDK's APIConnectionError as any cut stream does (aiohttp's own payload error
    escaped from the pause once: CI)."""
    import openai

    from agents_app.runtime import llm

    monkeypatch.setattr(llm, "READ_GAP_SEC", 60.0)
    # The role, then 一 after a wait for the network (pacing starts), then the connection is cut.
    llm_settings.queue(Reply(text="一二三四", chunk_size=1, chunk_delay=0.05, drop_after_chunks=2))
    stream = await llm_stream(model="fake-model", messages=[{"role": "user", "content": "hi"}], tools=None,
                              temperature=0.3, request_id="0123456789abcdef")
    texts = []
    try:
        with pytest.raises(openai.APIConnectionError):
            async with asyncio.timeout(20):
                async for chunk in stream:
                    texts += [c["delta"]["content"] for c in chunk.get("choices") or [] if c["delta"].get("content")]
    finally:
        await stream.close()
    assert texts == ["一"]
