"""Real providers' streams, as they were recorded, through the REST stream and `/v1` (the official
`openai` client): DeepSeek V4 and R1, Kimi K2, Zhipu GLM, vLLM, Ollama, Groq, OpenRouter and
OpenAI (testkit/model/streams/recorded/, where each comes from in SOURCES.md there), and
DashScope's recorded chunks framed both `data: {` and `data:{` (its recording kept the chunks, not
their framing). Every body goes out byte for byte — one event per write, and in writes of 7
bytes that cut characters, lines and events — and what the student gets is held to what the
recording itself says (`_recorded`: its text, reasoning, tool calls, usage, failure and
`finish_reason`, read with a plain JSON parser). None of the recorded sentences is ours.

A recording whose model called tools is followed by a scripted answer (the test agent has
none of the recorded tools: each call gets its "unknown tool" result, and the model is asked
again); it reports no usage, so the turn's usage is the recording's.
"""
import json
from dataclasses import dataclass, field

import openai
import pytest

from agents_app.runtime.loop import CUT_TEXT
from chat_app.accounts.api_keys import api_key_create
from chat_app.models import Message
from testkit.model.fake_llm import (
    Reply,
    body_pieces,
    payload_stream,
    recorded_payload_names,
    recorded_stream_names,
    stream_fixture,
)
from testkit.web.sse import chat

pytestmark = pytest.mark.django_db(transaction=True)

AFTER_TOOLS = "好的。"
NO_USAGE = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
PIECE_BYTES = 7


def _bodies() -> dict[str, bytes]:
    bodies = {name.removeprefix("recorded/"): stream_fixture(name).body for name in recorded_stream_names()}
    for name in recorded_payload_names():
        bodies[f"{name}-data-space"] = payload_stream(name, spaced=True)
        bodies[f"{name}-data-no-space"] = payload_stream(name, spaced=False)
    return bodies


BODIES = _bodies()


@dataclass
class Recorded:
    """What a recorded body says, read plainly."""

    text: str = ""
    reasoning: str = ""
    calls: dict = field(default_factory=dict)  # index → [name, arguments text]
    usage: dict | None = None
    failed: bool = False
    finish: str | None = None

    @property
    def cut(self) -> str | None:
        """The reason the model cut its answer (a failure is not a cut)."""
        if self.failed:
            return None
        return {"length": "length", "content_filter": "content_filter", "sensitive": "content_filter"}.get(self.finish)

    @property
    def tool_calls(self) -> list[tuple[str, dict]]:
        if self.failed or self.cut:
            return []
        return [(name, json.loads(args or "{}")) for name, args in (self.calls[i] for i in sorted(self.calls))]


def _events(body: bytes) -> list[dict]:
    events = []
    for block in body.decode().split("\n\n"):
        data = [line[5:].removeprefix(" ") for line in block.split("\n") if line.startswith("data:")]
        if not data:
            continue  # a comment (`: OPENROUTER PROCESSING`)
        if data == ["[DONE]"]:
            break
        events.append(json.loads("\n".join(data)))
    return events


def _recorded(body: bytes) -> Recorded:
    seen = Recorded()
    usage = {}  # place → last report: the chunk's, a choice's (Kimi), Groq's x_groq
    for event in _events(body):
        if isinstance(event.get("usage"), dict):
            usage[0] = event["usage"]
        if event.get("error") or event.get("object") == "error":
            seen.failed = True
            break
        if isinstance(event.get("x_groq"), dict) and isinstance(event["x_groq"].get("usage"), dict):
            usage[2] = event["x_groq"]["usage"]
        for choice in event.get("choices") or []:
            delta = choice.get("delta") or {}
            seen.text += (delta.get("content") or "") + (delta.get("refusal") or "")
            seen.reasoning += delta.get("reasoning_content") or delta.get("reasoning") or ""
            for fragment in delta.get("tool_calls") or []:
                call = seen.calls.setdefault(fragment.get("index", len(seen.calls)), ["", ""])
                function = fragment.get("function") or {}
                call[0] = call[0] or function.get("name") or ""
                call[1] += function.get("arguments") or ""
            if choice.get("finish_reason"):
                seen.finish = choice["finish_reason"]
            if isinstance(choice.get("usage"), dict):
                usage[1] = choice["usage"]
    if usage:
        report = usage[min(usage)]
        seen.usage = {"prompt_tokens": report["prompt_tokens"], "completion_tokens": report["completion_tokens"]}
    return seen


def test_the_corpus_has_every_provider_family_the_docs_name():
    families = {"deepseek_v4", "kimi_k2", "zhipu_glm", "vllm", "ollama", "groq", "openrouter", "dashscope",
                "openai_gpt_4o_refusal"}
    assert {f for f in families if any(f in name for name in BODIES)} == families
    assert any(name.endswith("data-no-space") and name.startswith("dashscope") for name in BODIES)
    assert b"\ndata:{" in BODIES["dashscope_qwen3_max_text-data-no-space"]


def _queue(llm, name: str, recorded: Recorded, *, piece_bytes: int | None) -> None:
    body = BODIES[name]
    pieces = body_pieces(body, piece_bytes) if piece_bytes else (
        stream_fixture(f"recorded/{name}").pieces.__iter__ if not name.startswith("dashscope") else
        body_pieces(body, len(body)))
    llm.queue(Reply(body=pieces))
    if recorded.tool_calls:
        llm.queue(Reply(text=AFTER_TOOLS, usage=NO_USAGE))


@pytest.mark.parametrize("writes", ["event-per-write", f"{PIECE_BYTES}-byte-writes"])
@pytest.mark.parametrize("name", sorted(BODIES))
def test_a_recorded_stream_through_the_rest_stream(live_asgi, llm_settings, agent, auth_headers, name, writes):
    recorded = _recorded(BODIES[name])
    _queue(llm_settings, name, recorded, piece_bytes=PIECE_BYTES if writes != "event-per-write" else None)
    result = chat(live_asgi, {"message": "你好"}, headers=auth_headers, timeout=30)

    assert result.types[0] == "session" and result.types[-1] == "done", result.types
    done = result.frames[-1]
    answer = recorded.text + (AFTER_TOOLS if recorded.tool_calls else "")
    assert result.text == done["full_text"] == answer
    assert "".join(f["content"] for f in result.of("reasoning")) == recorded.reasoning
    assert [(f["tool"], json.loads(f["args"])) for f in result.of("tool_call")] == recorded.tool_calls
    assert bool(done.get("interrupted")) == (recorded.failed or recorded.cut is not None)
    assert done.get("interrupted_reason") == recorded.cut
    if recorded.cut:
        assert result.of("error")[-1]["message"] == str(CUT_TEXT[recorded.cut])
    if recorded.tool_calls:  # the round's reasoning goes back with its calls (DeepSeek V4, Kimi K2)
        [calls_message] = [m for m in llm_settings.requests[1].messages if m.get("tool_calls")]
        assert calls_message.get("reasoning_content", "") == recorded.reasoning
    if recorded.usage:
        assert {k: done["usage"][k] for k in recorded.usage} == recorded.usage
        reply = Message.objects.get(id=done["message_id"])
        assert (reply.prompt_tokens, reply.completion_tokens) == tuple(recorded.usage.values())
    else:
        assert "usage" not in done


@pytest.mark.parametrize("name", sorted(BODIES))
def test_a_recorded_stream_through_the_openai_api(live_asgi, llm_settings, agent, user, name):
    recorded = _recorded(BODIES[name])
    _queue(llm_settings, name, recorded, piece_bytes=PIECE_BYTES)
    key = api_key_create(user=user, name="Chatbox")[1]
    with openai.OpenAI(base_url=f"{live_asgi}/v1", api_key=key, max_retries=0, timeout=30) as sdk:
        chunks = list(sdk.chat.completions.create(model="xiaozhi", messages=[{"role": "user", "content": "你好"}],
                                                  stream=True, stream_options={"include_usage": True}))

    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    reasoning = "".join((c.choices[0].delta.model_extra or {}).get("reasoning_content") or ""
                        for c in chunks if c.choices)
    # The text before the tool calls and the answer after them: two paragraphs (a blank line between)
    ending = len(recorded.text) - len(recorded.text.rstrip("\n"))
    paragraph = "\n\n"[min(ending, 2):] if recorded.text else ""
    answer = recorded.text + (paragraph + AFTER_TOOLS if recorded.tool_calls else "")
    if recorded.failed or recorded.cut:
        assert content.startswith(recorded.text) and "⚠️ " in content[len(recorded.text):]  # the text kept, the failure told
    else:
        assert content == answer
    assert reasoning.startswith(recorded.reasoning)  # then the tool lines, each on its own line
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == [recorded.cut or ("length" if recorded.failed else "stop")]
    usage = chunks[-1].usage
    if recorded.usage:
        assert (usage.prompt_tokens, usage.completion_tokens) == tuple(recorded.usage.values())
    else:
        assert (usage.prompt_tokens, usage.completion_tokens) == (0, 0)
