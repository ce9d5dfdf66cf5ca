"""The one place where a chat event becomes Server-Sent Events text (docs/design.md#the-chat-stream)."""
import json

from django.http import StreamingHttpResponse

from campus_agent.base.text import text_clean, text_valid

PING_FRAME = ": ping\n\n"
_NUL_ESCAPE = "\\u0000"  # how json.dumps writes U+0000


def _dumps(payload: dict) -> str:
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def sse_frame(payload: dict, *, event_id: int | None = None) -> str:
    """`data: <json>\\n\\n`, JSON without ASCII escaping so Chinese text stays readable; with
    `event_id`, an `id:` line first (a run's sequence number, docs/design.md#runs).

    Never fails on the payload's text: a lone surrogate (which UTF-8 cannot encode, so the
    response would fail after its headers went out), a NUL, or NaN / Infinity (not JSON) makes
    the payload go through `text_clean` first, as does a lazy translation (TypeError: a message
    of ours in the request's language). The check costs one scan of the encoded frame.
    """
    try:
        body = _dumps(payload)
    except (ValueError, TypeError):  # NaN / Infinity; a lazy translation
        body = _dumps(text_clean(payload))
    else:
        if _NUL_ESCAPE in body or not text_valid(body):
            body = _dumps(text_clean(payload))
    return f"data: {body}\n\n" if event_id is None else f"id: {event_id}\ndata: {body}\n\n"


def sse_response(frames) -> StreamingHttpResponse:
    """The chat stream's response (docs/design.md#the-chat-stream) around an (async) iterator of SSE text."""
    response = StreamingHttpResponse(frames, content_type="text/event-stream; charset=utf-8")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response
