"""The scripted model speaks the wire format the real `openai` SDK expects."""
import openai
import pytest

from testkit.model.fake_llm import Reply, ScriptedCall


async def _stream(llm, **kwargs):
    client = openai.AsyncOpenAI(base_url=llm.url, api_key="k", max_retries=0, timeout=3)
    try:
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True, **kwargs
        )
        return [chunk async for chunk in stream]
    finally:
        await client.close()


async def test_text_is_streamed_in_pieces_with_usage_on_request(llm_server):
    llm_server.reply_text("你好，我是校园小智。")
    chunks = await _stream(llm_server, stream_options={"include_usage": True})
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "你好，我是校园小智。"
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) >= 3
    assert chunks[-1].usage.completion_tokens == len(text)
    assert llm_server.requests[0].messages == [{"role": "user", "content": "hi"}]


async def test_tool_calls_arrive_as_interleaved_fragments_by_index(llm_server):
    llm_server.queue(Reply(tool_calls=[ScriptedCall("add", {"a": 1, "b": 22}), ScriptedCall("echo", {"text": "x"})],
                           interleave=True))
    chunks = await _stream(llm_server)
    fragments = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert [f.index for f in fragments[:4]] == [0, 1, 0, 1]
    merged = {}
    for f in fragments:
        merged[f.index] = merged.get(f.index, "") + (f.function.arguments or "")
    assert merged == {0: '{"a": 1, "b": 22}', 1: '{"text": "x"}'}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


async def test_scripted_http_errors_reach_the_sdk(llm_server):
    llm_server.fail(429)
    with pytest.raises(openai.RateLimitError):
        await _stream(llm_server)


async def test_responder_computes_replies_when_the_queue_is_empty(llm_server):
    llm_server.responder = lambda req: "echo:" + req.messages[-1]["content"]
    chunks = await _stream(llm_server)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "echo:hi"
