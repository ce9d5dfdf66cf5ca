"""A small SSE reader for the tests: frames as dicts, pings counted, on a real HTTP stream."""
import json
from dataclasses import dataclass, field

import httpx


@dataclass
class StreamResult:
    status: int
    headers: httpx.Headers
    frames: list[dict] = field(default_factory=list)
    pings: int = 0
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


def parse_events(raw: str) -> tuple[list[dict], int]:
    frames, pings = [], 0
    for block in raw.split("\n\n"):
        if not block:
            continue
        if block == ": ping":
            pings += 1
            continue
        assert block.startswith("data: "), f"unexpected SSE block {block!r}"
        frames.append(json.loads(block[len("data: "):]))
    return frames, pings


def chat(base_url: str, body: dict, *, headers: dict | None = None, timeout: float = 15.0, **client_kw) -> StreamResult:
    """POST /api/v1/chat and read the whole answer."""
    with httpx.Client(base_url=base_url, timeout=timeout, **client_kw) as client:
        with client.stream("POST", "/api/v1/chat", json=body, headers=headers or {}) as response:
            raw = "".join(response.iter_text())
    result = StreamResult(status=response.status_code, headers=response.headers, raw=raw)
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        result.frames, result.pings = parse_events(raw)
    else:
        result.body_json = json.loads(raw) if raw else None
    return result
