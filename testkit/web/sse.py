"""A small SSE reader for the tests: frames as dicts, pings counted, on a real HTTP stream."""
import json
import weakref
from dataclasses import dataclass, field

import httpx


@dataclass
class StreamResult:
    status: int
    headers: httpx.Headers
    frames: list[dict] = field(default_factory=list)
    pings: int = 0
    ids: list[int | None] = field(default_factory=list)  # each frame's SSE `id:` (None: none)
    raw: str = ""
    body_json: dict | None = None  # for a non-stream (error) answer

    @property
    def types(self) -> list[str]:
        return [f["type"] for f in self.frames]

    def of(self, type_: str) -> list[dict]:
        return [f for f in self.frames if f["type"] == type_]

    @property
    def text(self) -> str:
        return "".join(f["content"] for f in self.of("chunk"))


def parse_blocks(raw: str) -> tuple[list[tuple[int | None, dict]], int]:
    """(SSE `id:` or None, frame) per data block, and the number of `: ping` comments."""
    blocks, pings = [], 0
    for block in raw.split("\n\n"):
        if not block:
            continue
        if block == ": ping":
            pings += 1
            continue
        event_id = None
        if block.startswith("id: "):
            id_line, _, block = block.partition("\n")
            event_id = int(id_line[len("id: "):])
        assert block.startswith("data: "), f"unexpected SSE block {block!r}"
        blocks.append((event_id, json.loads(block[len("data: "):])))
    return blocks, pings


def parse_events(raw: str) -> tuple[list[dict], int]:
    blocks, pings = parse_blocks(raw)
    return [frame for _, frame in blocks], pings


def _result(response, raw: str) -> StreamResult:
    result = StreamResult(status=response.status_code, headers=response.headers, raw=raw)
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        blocks, result.pings = parse_blocks(raw)
        result.ids = [event_id for event_id, _ in blocks]
        result.frames = [frame for _, frame in blocks]
    else:
        result.body_json = json.loads(raw) if raw else None
    return result


def chat(base_url: str, body: dict, *, headers: dict | None = None, timeout: float = 15.0, **client_kw) -> StreamResult:
    """POST /api/v1/chat and read the whole answer."""
    with httpx.Client(base_url=base_url, timeout=timeout, **client_kw) as client:
        with client.stream("POST", "/api/v1/chat", json=body, headers=headers or {}) as response:
            raw = "".join(response.iter_text())
    return _result(response, raw)


def run_events(base_url: str, run_id: str, *, headers: dict | None = None, after: int | None = None,
               last_event_id: str | None = None, timeout: float = 15.0) -> StreamResult:
    """GET /api/v1/runs/<run_id>/events and read it to its end."""
    headers = dict(headers or {})
    if last_event_id is not None:
        headers["Last-Event-ID"] = last_event_id
    params = {"after": after} if after is not None else None
    with httpx.Client(base_url=base_url, timeout=timeout) as client:
        with client.stream("GET", f"/api/v1/runs/{run_id}/events", headers=headers, params=params) as response:
            raw = "".join(response.iter_text())
    return _result(response, raw)


_readers: "weakref.WeakKeyDictionary[httpx.Response, object]" = weakref.WeakKeyDictionary()


def _text_iter(response: httpx.Response):
    """One text iterator per response, so a test can read part of a stream and later the rest."""
    if response not in _readers:
        _readers[response] = response.iter_text()
    return _readers[response]


def read_until(response: httpx.Response, predicate) -> tuple[list[tuple[int | None, dict]], str]:
    """Reads an open stream until a frame matches `predicate`; (blocks so far, the raw text)."""
    raw = ""
    for text in _text_iter(response):
        raw += text
        complete = raw[: raw.rfind("\n\n") + 2]
        blocks, _ = parse_blocks(complete)
        if any(predicate(frame) for _, frame in blocks):
            return blocks, raw
    raise AssertionError(f"stream ended before the awaited frame: {raw[-500:]!r}")


def read_rest(response: httpx.Response) -> str:
    """The rest of a stream that `read_until` began."""
    return "".join(_text_iter(response))
