"""Real providers' streams (issue 21 point 4): the fixtures in testkit/model/streams/ (DashScope
Qwen3 thinking, vLLM with the qwen3 and hermes parsers or none, DeepSeek reasoner, Ollama), replayed
by the scripted model byte for byte in their recorded write pieces, through the whole stack: POST
/api/v1/chat on the live server, the openai SDK's request and our stream reader (runtime/llm.py),
the tool loop, sub-agents over HTTP, the stored rows and the next model request.

Two kinds of tests:

- what works today and must keep working: the answer text, tool calls run with their whole
  arguments (a Chinese character cut by a write boundary arrives whole), an `id` only in a call's
  first fragment, `finish_reason: "stop"` with tool calls, the usage in a last chunk without
  choices (or on the finish chunk, DeepSeek) stored on the reply row;
- `test_reasoning_*`: a thinking model's reasoning kept apart (docs/design.md#the-tool-loop): `reasoning` frames whose
  concatenation is the reasoning (without `<think>` tags), never in a `chunk`, `done.full_text` or
  a row's content, kept on the row's `meta.reasoning` (the tool_calls row: the reasoning before
  those calls; the final row: the answer round's), never sent back to the model. They fail until
  the runtime handles reasoning. Whitespace at the edges of a reasoning or answer text is not part
  of the contract (Qwen3 writes "<think>\\n…\\n</think>\\n\\n"): those comparisons strip it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import openai
import pytest

from agents_app.runtime.llm import llm_stream
from agents_app.runtime.loop import CUT_TEXT
from testkit.model.fake_llm import stream_fixture, stream_fixture_names

pytestmark = pytest.mark.django_db(transaction=True)

TAGS = ("<think>", "</think>", "<th", "think>")
REASONING_KEYS = ("reasoning_content", "reasoning", "thinking")
THANKS, WELCOME = "谢谢！", "不客气！"


@dataclass(frozen=True)
class Scenario:
    """One turn replayed from recorded streams, and what it must come to."""

    streams: tuple[str, ...]  # one recorded stream per model request of the turn
    answer: str  # the final reply (the text after the last tool round)
    reasoning: tuple[str, ...]  # each model request's reasoning
    calls: tuple[tuple[tuple[str, str], ...], ...] = ()  # per tool round: (tool, its `message` argument)
    round_text: tuple[str, ...] = ()  # per tool round: the model's text before its calls (reasoning aside)
    usage: dict = field(default_factory=dict)  # the turn's summed usage, as stored in meta.usage
    think_tags: bool = False  # the reasoning comes as <think>…</think> inside the content
    cut: str | None = None  # the model cut its answer (its finish_reason): Done.interrupted_reason

    @property
    def visible_text(self) -> str:
        """Every text frame of the turn, reasoning aside (Done.full_text)."""
        return "".join(self.round_text) + self.answer


def _usage(prompt: int, completion: int, total: int, cached: int | None = None) -> dict:
    usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": total}
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return usage


SCENARIOS = {
    "dashscope_qwen3_thinking": Scenario(
        streams=("dashscope_qwen3_thinking",),
        answer="你好！我是校园小智，可以帮你查食堂菜单、课程安排和校园通知。有什么想问的吗？",
        reasoning=("嗯，用户在问我是谁。我是校园小智，应该简单介绍自己能做什么：查食堂、课程和通知。语气要友好。",),
        usage=_usage(186, 74, 260),
    ),
    "dashscope_qwen3_thinking_tools": Scenario(
        streams=("dashscope_qwen3_thinking_tools", "dashscope_qwen3_thinking_tools_answer"),
        answer="二食堂今天中午有红烧肉、清炒时蔬和番茄蛋汤。\n\n图书馆本周开放时间是 8:00–22:30。",
        reasoning=("用户问了两件事：二食堂今天中午的菜，和图书馆这周的开放时间。两个问题互不相关，可以同时调用食堂助手和通知助手。",
                   "食堂助手说二食堂今天中午有红烧肉、清炒时蔬和番茄蛋汤，通知助手说图书馆本周 8:00 到 22:30 开放，整理一下告诉用户。"),
        calls=((("call_canteen", "二食堂今天中午的菜单"), ("call_notice", "图书馆本周开放时间")),),
        round_text=("",),
        usage=_usage(1032 + 1210, 96 + 88, 1128 + 1298, 896 + 1024),
    ),
    "vllm_qwen3_reasoning_content_hermes": Scenario(
        streams=("vllm_qwen3_reasoning_content_hermes", "vllm_qwen3_reasoning_content_answer"),
        answer="一食堂的早餐供应到 9:30，现在去还来得及。",
        reasoning=("用户想知道一食堂现在还有没有早饭，我需要问一下食堂助手。", "食堂助手回复了，一食堂早餐供应到 9:30，现在还来得及。"),
        calls=((("call_canteen", "一食堂现在还供应早饭吗"),),),
        # vLLM sends the blank lines after </think> as content; a round's content that is only
        # whitespace is no text (ThinkSplitter holds leading whitespace and drops it at the end).
        round_text=("",),
        usage=_usage(412 + 498, 59 + 43, 471 + 541),
    ),
    "vllm_qwen3_reasoning": Scenario(
        streams=("vllm_qwen3_reasoning",),
        answer="本科生宿舍一般 23:00 熄灯，周五、周六延后到 23:30。具体以宿管通知为准。",
        reasoning=("用户问宿舍晚上几点熄灯。学校规定本科生宿舍 23:00 熄灯，周五、周六延后半小时。",),
        usage=_usage(203, 65, 268),
    ),
    "vllm_qwen3_think_in_content": Scenario(
        streams=("vllm_qwen3_think_in_content",),
        answer="校医院周末上午 8:00–12:00 开诊，急诊 24 小时开放。",
        reasoning=("用户问校医院周末开不开门。我记得周末上午开。",),
        usage=_usage(188, 64, 252),
        think_tags=True,
    ),
    "vllm_qwen3_think_then_tool_calls": Scenario(
        streams=("vllm_qwen3_think_then_tool_calls", "vllm_qwen3_think_then_tool_calls_answer"),
        answer="二食堂今天有宫保鸡丁和麻婆豆腐。",
        reasoning=("用户想查二食堂今天的菜单，调用食堂助手。", "食堂助手已经回复。"),
        calls=((("call_canteen", "二食堂今天的菜单"),),),
        round_text=("",),
        usage=_usage(356 + 431, 41 + 39, 397 + 470),
        think_tags=True,
    ),
    "vllm_qwen3_think_unclosed": Scenario(
        streams=("vllm_qwen3_think_unclosed",),
        answer="",
        reasoning=("用户问这学期选课什么时候截止。选课系统的通知里说第二轮选课",),
        usage=_usage(175, 32, 207),
        think_tags=True,
        cut="length",  # max_tokens ran out inside the reasoning: the reply is marked as cut
    ),
    "deepseek_reasoner": Scenario(
        streams=("deepseek_reasoner",),
        answer="你这学期一共 16 学分：3×4 + 2×2 = 16。",
        reasoning=("用户有3 门 4 学分的课，3×4=12；还有 2 门 2 学分的，2×2=4；一共 16 学分。",),
        usage=_usage(612, 96, 708, 576),
    ),
    "ollama_qwen3_reasoning_tools": Scenario(
        streams=("ollama_qwen3_reasoning_tools", "ollama_qwen3_reasoning_tools_answer"),
        answer="一食堂中午：红烧排骨、土豆丝；二食堂中午：红烧肉、清炒时蔬。",
        reasoning=("好的，用户想知道一食堂和二食堂今天中午的菜。我分别问一下食堂助手。", "两个食堂的菜单都拿到了，汇总一下。"),
        calls=((("call_canteen", "一食堂今天中午的菜单"), ("call_canteen", "二食堂今天中午的菜单")),),
        round_text=("",),
        usage=_usage(298 + 401, 84 + 47, 382 + 448),
    ),
}
ALL = pytest.mark.parametrize("name", list(SCENARIOS))
WITH_TOOLS = pytest.mark.parametrize("name", [n for n, s in SCENARIOS.items() if s.calls])


# --- the turn, on the live server ------------------------------------------------------------------
@pytest.fixture
def two_tool_agent(agent_factory, sub_agent_factory):
    """The default agent offered two sub-agents: `call_canteen` and `call_notice` (both served by
    the contract sub-agent, which records what each call asked)."""
    canteen = sub_agent_factory()
    notice = sub_agent_factory(name="notice", description="通知助手：图书馆、开放时间、校园通知。", domain="notice")
    return agent_factory(sub_agents=[canteen, notice])


@pytest.fixture
def ask(live_asgi, llm_settings, two_tool_agent, user):
    """`ask(message, conversation_id=None)`: one POST /api/v1/chat, read to its end (StreamResult)."""
    from chat_app.accounts.sessions import auth_session_create
    from chat_app.models import AuthSession
    from testkit.web.sse import chat

    token = auth_session_create(user=user, via=AuthSession.Via.PASSWORD, roles=["student"]).access_token

    def send(message: str, conversation_id: str | None = None):
        result = chat(live_asgi, {"message": message, "conversation_id": conversation_id},
                      headers={"Authorization": f"Bearer {token}"}, timeout=20)
        assert result.status == 200, result.body_json
        assert result.types[0] == "session" and result.types[-1] == "done", result.types
        return result

    return send


def _replayed_turn(ask, llm, scenario: Scenario, *, delay: float = 0.002, piece_bytes: int | None = None):
    llm.replay(*scenario.streams, delay=delay, piece_bytes=piece_bytes)
    result = ask("帮我问问")
    assert llm.pending == 0, "a recorded stream was not asked for"
    return result


def _rows(result) -> list:
    from chat_app.models import Message

    conversation_id = result.frames[0]["conversation_id"]
    return list(Message.objects.filter(conversation_id=conversation_id).order_by("created_at", "seq"))


def _final_row(result):
    rows = _rows(result)
    assert str(rows[-1].id) == result.frames[-1]["message_id"]
    return rows[-1]


def _call_rows(result) -> list:
    return [r for r in _rows(result) if r.role == "assistant" and r.meta.get("tool_calls")]


def _rounds(result) -> list[list[dict]]:
    """The frames split per model request: a new round starts at the first frame after a tool round."""
    rounds: list[list[dict]] = [[]]
    in_tools = False
    for frame in result.frames[1:]:
        if frame["type"] in ("tool_call", "tool_chunk", "tool_result"):
            in_tools = True
        elif in_tools:
            rounds.append([])
            in_tools = False
        rounds[-1].append(frame)
    return rounds


def _asked(result) -> list[list[tuple[str, str]]]:
    """The tool calls of each tool round, as (tool, `message` argument)."""
    asked = []
    for frames in _rounds(result):
        calls = [(f["tool"], json.loads(f["args"])["message"]) for f in frames if f["type"] == "tool_call"]
        if calls:
            asked.append(calls)
    return asked


def _assert_usage(stored: dict, expected: dict) -> None:
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        assert stored.get(key) == expected[key], (key, stored)
    if "prompt_tokens_details" in expected:
        assert stored["prompt_tokens_details"]["cached_tokens"] == expected["prompt_tokens_details"]["cached_tokens"]


# --- what works today ------------------------------------------------------------------------------
@ALL
@pytest.mark.parametrize("pieces", ["recorded", "5-byte"])
def test_replayed_stream_answers_runs_the_tools_and_stores_the_usage(ask, llm_settings, subagent_server, name,
                                                                     pieces):
    scenario = SCENARIOS[name]
    result = _replayed_turn(ask, llm_settings, scenario, piece_bytes=5 if pieces == "5-byte" else None,
                            delay=0.0 if pieces == "5-byte" else 0.002)

    if scenario.cut:
        assert [e["message"] for e in result.of("error")] == [str(CUT_TEXT[scenario.cut])]
        assert result.frames[-1]["interrupted_reason"] == scenario.cut
    else:
        assert not result.of("error") and not result.frames[-1].get("interrupted")
    assert _asked(result) == [list(c) for c in scenario.calls]
    assert sorted(r.message for r in subagent_server.requests) == sorted(m for c in scenario.calls for _, m in c)
    assert all(f["ok"] for f in result.of("tool_result"))
    final = _final_row(result)
    assert result.text == result.frames[-1]["full_text"] == scenario.visible_text
    assert final.content == scenario.answer
    _assert_usage(final.meta["usage"], scenario.usage)


def test_the_fake_sends_the_recorded_bytes_in_the_recorded_pieces(llm_server):
    """What a client reads off the socket: the body byte for byte, and a read that ends inside a
    character (each write is a chunk of the chunked body, read apart with a pause between)."""
    import httpx

    fixture = stream_fixture("dashscope_qwen3_thinking_tools")
    llm_server.replay(fixture.name, delay=0.02)
    with httpx.Client(timeout=10) as client:
        with client.stream("POST", f"{llm_server.url}/chat/completions",
                           json={"model": "qwen3-235b-a22b", "messages": [], "stream": True}) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            reads = list(response.iter_raw())
    assert b"".join(reads) == fixture.body
    assert reads == list(fixture.pieces)
    assert [r for r in reads if not _decodes(r)], "no read ends inside a character"


def test_tool_arguments_cut_inside_a_character_arrive_whole(ask, llm_settings, subagent_server):
    fixture = stream_fixture("dashscope_qwen3_thinking_tools")
    cut = [p for p in fixture.pieces if not _decodes(p)]
    assert cut and all(b'"arguments":"' in p for p in cut[::2]), "the recording cuts inside the arguments"

    result = _replayed_turn(ask, llm_settings, SCENARIOS["dashscope_qwen3_thinking_tools"], delay=0.01)

    calls = result.of("tool_call")
    assert [json.loads(c["args"]) for c in calls] == [{"message": "二食堂今天中午的菜单"},
                                                      {"message": "图书馆本周开放时间"}]
    assert sorted(r.message for r in subagent_server.requests) == ["二食堂今天中午的菜单", "图书馆本周开放时间"]
    sent_back = llm_settings.requests[1].messages
    calls_message = next(m for m in sent_back if m["role"] == "assistant" and m.get("tool_calls"))
    assert [json.loads(c["function"]["arguments"]) for c in calls_message["tool_calls"]] == [
        {"message": "二食堂今天中午的菜单"}, {"message": "图书馆本周开放时间"}]


def test_finish_reason_stop_with_tool_calls_still_runs_them(ask, llm_settings, subagent_server):
    last_choice = json.loads(stream_fixture("dashscope_qwen3_thinking_tools").events[-3])["choices"][0]
    assert last_choice["finish_reason"] == "stop"

    result = _replayed_turn(ask, llm_settings, SCENARIOS["dashscope_qwen3_thinking_tools"])

    assert sorted(f["tool"] for f in result.of("tool_result") if f["ok"]) == ["call_canteen", "call_notice"]
    assert len(llm_settings.requests) == 2 and llm_settings.requests[1].messages[-1]["role"] == "tool"
    assert _final_row(result).content == SCENARIOS["dashscope_qwen3_thinking_tools"].answer


@pytest.mark.parametrize("name", ["dashscope_qwen3_thinking", "vllm_qwen3_reasoning", "deepseek_reasoner"])
def test_usage_of_the_last_chunk_is_stored_on_the_reply(ask, llm_settings, name):
    fixture = stream_fixture(name)
    last = json.loads(fixture.events[-2])
    if name == "deepseek_reasoner":  # on the finish chunk
        assert last["choices"][0]["finish_reason"] == "stop" and last["usage"]
    else:  # in a chunk of its own, with no choices
        assert last["choices"] == [] and last["usage"]

    result = _replayed_turn(ask, llm_settings, SCENARIOS[name])

    final = _final_row(result)
    _assert_usage(final.meta["usage"], SCENARIOS[name].usage)
    assert final.prompt_tokens == last["usage"]["prompt_tokens"]
    assert final.completion_tokens == last["usage"]["completion_tokens"]


@WITH_TOOLS
def test_ids_only_in_the_first_fragment_still_pair_calls_and_results(ask, llm_settings, name):
    scenario = SCENARIOS[name]
    fragments = [f for e in stream_fixture(scenario.streams[0]).events[:-1]
                 for c in json.loads(e)["choices"] for f in c["delta"].get("tool_calls") or ()]
    firsts = {f["index"]: f for f in reversed(fragments)}
    assert all(f["id"] for f in firsts.values())
    assert all(not f.get("id") for f in fragments if all(f is not g for g in firsts.values()))

    result = _replayed_turn(ask, llm_settings, scenario)

    # the rows: each tool_calls row's ids, then one tool row per call in that order
    rows = _rows(result)
    for at, row in enumerate(rows):
        if row.role == "assistant" and row.meta.get("tool_calls"):
            ids = [c["id"] for c in row.meta["tool_calls"]]
            tool_rows = rows[at + 1 : at + 1 + len(ids)]
            assert [r.role for r in tool_rows] == ["tool"] * len(ids)
            assert [r.meta["tool_call_id"] for r in tool_rows] == ids
            assert len(set(ids)) == len(ids)
    # the request after the tool round: the assistant's calls and the tool messages pair the same way
    messages = llm_settings.requests[1].messages
    at = next(i for i, m in enumerate(messages) if m["role"] == "assistant" and m.get("tool_calls"))
    ids = [c["id"] for c in messages[at]["tool_calls"]]
    assert [m.get("tool_call_id") for m in messages[at + 1 : at + 1 + len(ids)]] == ids
    assert [f["call_id"] for f in result.of("tool_call")] == ids


@pytest.mark.parametrize("name", stream_fixture_names())
async def test_each_recording_reads_the_same_through_our_reader_and_the_sdk(llm_settings, name):
    """The fixture itself, through runtime/llm.py's reader and through the plain openai SDK: the
    same text, tool calls (merged by index), reasoning fields and usage."""
    llm_settings.replay(name, name)
    ours = _digest_dicts([chunk async for chunk in _read_with_llm_stream()])
    client = openai.AsyncOpenAI(base_url=llm_settings.url, api_key="sk-test-0123456789abcdef", max_retries=0)
    try:
        stream = await client.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "你好"}],
                                                      stream=True, stream_options={"include_usage": True})
        sdk = _digest_dicts([chunk.model_dump(exclude_unset=True) async for chunk in stream])
    finally:
        await client.close()
    assert ours == sdk
    assert ours["text"] or ours["calls"] or ours["reasoning"]
    assert ours["usage"], "every recording reports its usage"


async def _read_with_llm_stream():
    stream = await llm_stream(model="fake-model", messages=[{"role": "user", "content": "你好"}], tools=None,
                              temperature=0.3, request_id="0123456789abcdef")
    try:
        async for chunk in stream:
            yield chunk
    finally:
        await stream.close()


def _digest_dicts(chunks: list[dict]) -> dict:
    text, reasoning, calls, usage = [], [], {}, None
    for chunk in chunks:
        usage = chunk.get("usage") or usage
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            text.append(delta.get("content") or "")
            reasoning.append(delta.get("reasoning_content") or delta.get("reasoning") or "")
            for fragment in delta.get("tool_calls") or ():
                call = calls.setdefault(fragment["index"], {"name": "", "arguments": ""})
                function = fragment.get("function") or {}
                call["name"] = call["name"] or function.get("name") or ""
                call["arguments"] += function.get("arguments") or ""
    return {"text": "".join(text), "reasoning": "".join(reasoning), "calls": calls, "usage": usage}


def _decodes(piece: bytes) -> bool:
    try:
        piece.decode()
    except UnicodeDecodeError:
        return False
    return True


# --- reasoning (docs/design.md#the-tool-loop): fails until the runtime handles it -------------------------------------
def _markers(scenario: Scenario) -> list[str]:
    """Pieces of the reasoning that must show up nowhere but in reasoning frames and meta.reasoning."""
    return [r[:8] for r in scenario.reasoning if r]


def _assert_no_reasoning_in(text: str, scenario: Scenario, where: str) -> None:
    for marker in (*TAGS, *_markers(scenario)):
        assert marker not in text, f"{where} holds reasoning ({marker!r}): {text!r}"


@ALL
def test_reasoning_frames_carry_the_reasoning_and_no_text_frame_does(ask, llm_settings, name):
    scenario = SCENARIOS[name]
    result = _replayed_turn(ask, llm_settings, scenario)

    rounds = _rounds(result)
    assert len(rounds) == len(scenario.reasoning)
    for frames, expected in zip(rounds, scenario.reasoning, strict=True):
        reasoning = [f for f in frames if f["type"] == "reasoning"]
        assert reasoning, f"no reasoning frame in this round: {[f['type'] for f in frames]}"
        assert "".join(f["content"] for f in reasoning).strip() == expected
        assert set(reasoning[0]) == {"type", "content"}
    for frame in result.of("chunk"):
        _assert_no_reasoning_in(frame["content"], scenario, "a chunk frame")
    _assert_no_reasoning_in(result.frames[-1]["full_text"], scenario, "done.full_text")
    assert result.text.strip() == result.frames[-1]["full_text"].strip() == scenario.visible_text.strip()


@ALL
def test_reasoning_is_kept_on_the_rows_meta_and_never_in_their_content(ask, llm_settings, name):
    scenario = SCENARIOS[name]
    result = _replayed_turn(ask, llm_settings, scenario)

    final = _final_row(result)
    assert isinstance(final.meta.get("reasoning"), str), final.meta
    assert final.meta["reasoning"].strip() == scenario.reasoning[-1]
    assert final.content.strip() == scenario.answer
    _assert_no_reasoning_in(final.content, scenario, "the reply row's content")
    call_rows = _call_rows(result)
    assert len(call_rows) == len(scenario.calls)
    for row, expected, text in zip(call_rows, scenario.reasoning, scenario.round_text, strict=False):
        assert isinstance(row.meta.get("reasoning"), str), row.meta
        assert row.meta["reasoning"].strip() == expected
        assert row.content.strip() == text.strip()
        _assert_no_reasoning_in(row.content, scenario, "a tool_calls row's content")
    for row in _rows(result):
        _assert_no_reasoning_in(json.dumps(row.meta.get("tool_calls") or [], ensure_ascii=False), scenario,
                                "a stored tool call")


@ALL
def test_reasoning_goes_back_only_as_a_tool_rounds_reasoning_content(ask, llm_settings, name):
    """Never as text; a round that called tools has its reasoning sent back with its calls, as
    `reasoning_content` (DeepSeek V4 and Kimi K2 refuse a request without it), in the turn's
    next requests and the next turn's history; the answer's own reasoning is never sent back."""
    scenario = SCENARIOS[name]
    first = _replayed_turn(ask, llm_settings, scenario)
    llm_settings.reply_text(WELCOME)
    second = ask(THANKS, conversation_id=first.frames[0]["conversation_id"])
    assert second.frames[-1]["full_text"] == WELCOME

    tool_rounds = scenario.reasoning[:len(scenario.calls)]
    # the requests after a tool round within the turn, and the next turn's request
    for request in llm_settings.requests[1:]:
        sent_back = []
        for message in request.messages:
            shown = {k: v for k, v in message.items() if k != "reasoning_content"}
            assert not set(shown) & set(REASONING_KEYS), message
            _assert_no_reasoning_in(json.dumps(shown, ensure_ascii=False), scenario, "a message sent to the model")
            if "reasoning_content" in message:
                assert message["role"] == "assistant" and message.get("tool_calls"), message
                sent_back.append(message["reasoning_content"].strip())
        if any(tool_rounds):  # every tool round so far, in order ("" for one that reasoned nothing)
            assert sent_back and sent_back == [r.strip() for r in tool_rounds][:len(sent_back)], sent_back
        else:
            assert sent_back == []
    assert scenario.reasoning[-1][:8] not in json.dumps(llm_settings.requests[-1].messages, ensure_ascii=False) \
        or scenario.reasoning[-1] in tool_rounds
    history = llm_settings.requests[-1].messages
    assert history[-1] == {"role": "user", "content": THANKS}
    if scenario.answer:  # a reply with no text is not sent back (chat_app.conversations.history.history_build)
        said = [m for m in history if m["role"] == "assistant" and not m.get("tool_calls")]
        assert said and said[-1]["content"].strip() == scenario.answer
