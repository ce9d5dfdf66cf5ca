"""The one place where a chat event becomes Server-Sent Events text (DESIGN §4)."""
import json

PING_FRAME = ": ping\n\n"


def sse_frame(payload: dict) -> str:
    """`data: <json>\\n\\n`, JSON without ASCII escaping so Chinese text stays readable."""
    return f"data: {json.dumps(payload, ensure_ascii=False, separators=(',', ':'))}\n\n"
