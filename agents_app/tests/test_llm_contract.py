"""The model stream reader (runtime/llm.py) fails the way the openai SDK does.

llm.py lets the SDK build and send the request and map HTTP statuses, but reads the streamed body
itself, as plain dicts. Each case below is scripted on the fake model twice: once read through
`llm_stream`, once through the plain SDK (`AsyncOpenAI(...).chat.completions.create(stream=True)`),
and both must end the same way: the same chunks, then the same exception (class, status, message,
body) or none. Where the reader deliberately differs, the case says how and why.

The reader sends through aiohttp (the SDK's own aiohttp client, agents_app/runtime/model_transport.py),
the plain SDK through its default httpx client: a transport error's cause is compared by its
kind (a timeout, or another transport failure), not by the class each transport names it with
(h11 says RemoteProtocolError where aiohttp's payload error is a ReadError).
"""
import json
import socket
from dataclasses import dataclass
from typing import Any

import httpx2
import openai
import pytest
from starlette.applications import Starlette
from starlette.responses import StreamingResponse
from starlette.routing import Route

from agents_app.runtime.llm import STREAM_BAD_JSON_MESSAGE, llm_stream
from testkit.model.fake_llm import Reply
from testkit.servers import ServedApp

TIMEOUT = 0.5  # seconds: the stalling cases wait this long, twice
# Every other case: a model that answers at once is never waited for this long, however loaded the
# machine (with TIMEOUT for all, one side of a comparison could time out under load and not the other).
READ_TIMEOUT = 10.0
STALLING = {"timeout before the headers", "timeout mid-stream"}
TEXT = "一食堂今天有红烧肉"
MESSAGES = [{"role": "user", "content": "今天吃啥"}]


@dataclass(frozen=True)
class Outcome:
    texts: tuple[str, ...]  # the text deltas read before the stream ended
    error: type[BaseException] | None = None
    status: int | None = None
    message: str | None = None
    body: Any = None
    cause: type[BaseException] | None = None


def _cause_kind(cause: BaseException | None) -> type[BaseException] | None:
    if isinstance(cause, httpx2.TimeoutException):
        return httpx2.TimeoutException
    if isinstance(cause, httpx2.TransportError):
        return httpx2.TransportError
    return type(cause) if cause is not None else None


def _ended(texts: list[str], exc: BaseException | None) -> Outcome:
    if exc is None:
        return Outcome(tuple(texts))
    cause = _cause_kind(exc.__cause__)
    return Outcome(tuple(texts), type(exc), getattr(exc, "status_code", None), getattr(exc, "message", None),
                   getattr(exc, "body", None), cause)


async def read_with_llm_stream() -> Outcome:
    texts: list[str] = []
    stream = None
    try:
        stream = await llm_stream(model="fake-model", messages=MESSAGES, tools=None, temperature=0.3,
                                  request_id="0123456789abcdef")
        async for chunk in stream:
            texts += [c["delta"]["content"] for c in chunk["choices"] if c["delta"].get("content")]
    except Exception as exc:  # noqa: BLE001 - the outcome is what is compared
        return _ended(texts, exc)
    finally:
        if stream is not None:
            await stream.close()
    return _ended(texts, None)


async def read_with_the_sdk(base_url: str, timeout: float = READ_TIMEOUT) -> Outcome:
    texts: list[str] = []
    client = openai.AsyncOpenAI(base_url=base_url, api_key="sk-test-0123456789abcdef", timeout=timeout,
                                max_retries=0)
    try:
        stream = await client.chat.completions.create(model="fake-model", messages=MESSAGES, temperature=0.3,
                                                      stream=True, stream_options={"include_usage": True})
        async for chunk in stream:
            texts += [c.delta.content for c in chunk.choices if c.delta.content]
    except Exception as exc:  # noqa: BLE001 - the outcome is what is compared
        return _ended(texts, exc)
    finally:
        await client.close()
    return _ended(texts, None)


@pytest.fixture
def model(llm_settings, settings):
    settings.LLM_TIMEOUT = READ_TIMEOUT
    return llm_settings


async def both(model, reply: Reply, *, settings=None, timeout: float = READ_TIMEOUT) -> tuple[Outcome, Outcome]:
    """The same reply read by the reader and by the SDK, each with `timeout` (the test's
    `settings` fixture's LLM_TIMEOUT, when another than the fixture's)."""
    if settings is not None:
        settings.LLM_TIMEOUT = timeout
    model.queue(reply, reply)
    return await read_with_llm_stream(), await read_with_the_sdk(model.url, timeout)


SAME = {
    "complete": Reply(text=TEXT, chunk_size=3),
    "complete, terse framing": Reply(text=TEXT, chunk_size=3, terse_frames=True),
    "HTTP 400": Reply(status=400),
    "HTTP 401": Reply(status=401),
    "HTTP 429": Reply(status=429),
    "HTTP 500": Reply(status=500),
    "timeout before the headers": Reply(text=TEXT, stall_sec=TIMEOUT * 3),
    "timeout mid-stream": Reply(text=TEXT, chunk_size=3, hang_after_chunks=2),
    "stream cut": Reply(text=TEXT, chunk_size=3, drop_after_chunks=2),
    "stream cut before any chunk": Reply(text=TEXT, drop_after_chunks=0),
    "error chunk inside the stream": Reply(text=TEXT, chunk_size=3, error_after_chunks=2),
}
EXPECTED_ERROR = {
    "complete": None,
    "complete, terse framing": None,
    "HTTP 400": openai.BadRequestError,
    "HTTP 401": openai.AuthenticationError,
    "HTTP 429": openai.RateLimitError,
    "HTTP 500": openai.InternalServerError,
    "timeout before the headers": openai.APITimeoutError,
    "timeout mid-stream": openai.APITimeoutError,
    "stream cut": openai.APIConnectionError,
    "stream cut before any chunk": openai.APIConnectionError,
    "error chunk inside the stream": openai.APIError,
}


@pytest.mark.parametrize("case", SAME)
async def test_the_reader_ends_as_the_sdk_does(model, settings, case):
    ours, sdk = await both(model, SAME[case], settings=settings, timeout=TIMEOUT if case in STALLING else READ_TIMEOUT)
    assert ours == sdk
    assert sdk.error is EXPECTED_ERROR[case]  # the case scripts the failure it names


async def test_a_chunk_that_is_not_json_ends_the_stream_as_an_sdk_error_not_a_bare_value_error(model):
    # The SDK lets `json.JSONDecodeError` escape from the iteration; the reader raises the SDK's
    # `openai.APIError` from it instead, so the tool loop handles one family of errors (the turn
    # ends with "AI 模型回答中断" instead of crashing). Same chunks, same cause.
    ours, sdk = await both(model, Reply(text=TEXT, chunk_size=3, junk_after_chunks=2))
    assert ours.texts == sdk.texts == ("一食堂",)  # the role chunk, then one piece of text
    assert sdk.error is json.JSONDecodeError
    assert (ours.error, ours.message, ours.cause) == (openai.APIError, STREAM_BAD_JSON_MESSAGE, json.JSONDecodeError)


async def test_a_200_answer_that_is_not_a_stream_is_an_error_not_an_empty_answer(model):
    # Some providers answer a quota or moderation failure with status 200 and a JSON body. The
    # SDK finds no events in it and ends as if the model had said nothing; the reader raises
    # `openai.APIError`, so the turn is a model failure (keyword routing may answer) instead of
    # an empty reply.
    ours, sdk = await both(model, Reply(text=TEXT, error_as_json=True))
    assert sdk == Outcome(texts=())
    assert ours.error is openai.APIError and ours.texts == () and "event stream" in ours.message


async def test_a_model_nobody_listens_for_is_a_connection_error_not_a_timeout(settings):
    # The SDK's aiohttp adapter names a refused connection a ConnectTimeout ("Request timed
    # out"); the reader's transport names it as httpx does, so staff read "cannot connect".
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        base_url = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    settings.LLM_BASE_URL, settings.LLM_TIMEOUT = base_url, READ_TIMEOUT
    ours, sdk = await read_with_llm_stream(), await read_with_the_sdk(base_url)
    assert ours == sdk
    assert sdk.error is openai.APIConnectionError and sdk.cause is httpx2.TransportError


# --- bodies the fake model does not script, sent as raw bytes ---------------------------------

_CHUNK = ('data: {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "fake-model", '
          '"choices": [{"index": 0, "delta": {"content": "好"}, "finish_reason": null}]}\n\n')


class RawModel(ServedApp):
    """Answers every request with `body` as a 200 event stream."""

    def __init__(self):
        self.body = ""
        self.app = Starlette(routes=[Route("/v1/chat/completions", self._chat, methods=["POST"])])

    async def _chat(self, request):
        await request.body()
        return StreamingResponse(iter([self.body]), media_type="text/event-stream")


@pytest.fixture
def raw_model(settings):
    with RawModel() as server:
        settings.LLM_BASE_URL = f"{server.root_url}/v1"
        settings.LLM_TIMEOUT = READ_TIMEOUT
        yield server


RAW_SAME = {
    "an error chunk whose error is a string": _CHUNK + 'data: {"error": "quota exceeded"}\n\n',
    "an error event": _CHUNK + 'event: error\ndata: {"error": {"message": "overloaded"}}\n\n',
    "the stream ends without [DONE]": _CHUNK + _CHUNK,
    "the stream ends inside a frame": _CHUNK + 'data: {"id": "c", "choi',
}


@pytest.mark.parametrize("case", RAW_SAME)
async def test_the_reader_ends_as_the_sdk_does_on_raw_bodies(raw_model, case):
    raw_model.body = RAW_SAME[case]
    ours, sdk = await read_with_llm_stream(), await read_with_the_sdk(f"{raw_model.root_url}/v1")
    assert ours == sdk


async def test_an_event_without_data_is_skipped_where_the_sdk_fails_to_parse_it(raw_model):
    # SSE allows an event with no data line (`event: ping`, a keep-alive some proxies send); the
    # SDK hands its empty data to `json.loads` and raises `json.JSONDecodeError`. The reader skips
    # it, as the SSE standard does.
    raw_model.body = _CHUNK + "event: ping\n\n" + _CHUNK + "data: [DONE]\n\n"
    ours, sdk = await read_with_llm_stream(), await read_with_the_sdk(f"{raw_model.root_url}/v1")
    assert ours == Outcome(texts=("好", "好"))
    assert sdk.texts == ("好",) and sdk.error is json.JSONDecodeError
