"""Loaded into one gateway worker by bench/turn_timeline.py (BENCH_TIMELINE=path): wraps the
functions a chat turn passes through and notes the instant each is reached, then appends the
turn's marks to `path` as one JSON line when its response ends. The product's code is unchanged;
a function a tree does not have is not wrapped (its mark is missing from that tree's lines).

One turn at a time: the marks are of the turn in flight (the script sends them one after another).
"""
import functools
import json
import os
import time
from contextlib import aclosing

import campus_agent.asgi as asgi  # sets Django up; uvicorn then imports the wrapped `application`

PATH = os.environ["BENCH_TIMELINE"]
CHAT_PATH = "/api/v1/chat"
_marks: dict[str, float] = {}


def mark(name: str) -> None:
    _marks.setdefault(name, time.perf_counter())  # the first time a turn reaches it


def _wrap_async(owner, name: str, before: str, after: str | None = None) -> None:
    original = getattr(owner, name, None)
    if original is None:
        return

    @functools.wraps(original)
    async def wrapped(*args, **kwargs):
        mark(before)
        try:
            return await original(*args, **kwargs)
        finally:
            if after:
                mark(after)

    setattr(owner, name, wrapped)


def _wrap_sync(owner, name: str, before: str, after: str) -> None:
    original = getattr(owner, name, None)
    if original is None:
        return

    @functools.wraps(original)
    def wrapped(*args, **kwargs):
        mark(before)
        try:
            return original(*args, **kwargs)
        finally:
            mark(after)

    setattr(owner, name, wrapped)


def _wrap_first_item(owner, name: str, first: str) -> None:
    """An async generator method: marks its first item."""
    original = getattr(owner, name, None)
    if original is None:
        return

    @functools.wraps(original)
    async def wrapped(*args, **kwargs):
        async with aclosing(original(*args, **kwargs)) as items:
            async for item in items:
                mark(first)
                yield item

    setattr(owner, name, wrapped)


def _install() -> None:
    from agents_app.runtime import llm, model_transport
    from chat_app.runs import admission, engine

    _wrap_async(engine, "turn_open", "admission asked", "admitted")
    # The group commits' thread work (a lone call: `_one`; several: `_many`).
    for commit, label in ((getattr(admission, "ADMISSIONS", None), "admission"), (getattr(engine, "FINISHES", None),
                                                                                 "storing")):
        if commit is not None:
            _wrap_sync(commit, "_one", f"{label} on its thread", f"{label} committed")
            _wrap_sync(commit, "_many", f"{label} on its thread", f"{label} committed")
    _wrap_first_item(llm.LlmStream, "_read", "model's first event read")
    transport = getattr(model_transport, "_ErrorsNamed", None)
    if transport is not None:
        _wrap_async(transport, "handle_async_request", "model request sent", "model's headers read")
    _wrap_async(llm, "_drain", "model's [DONE] read")
    _wrap_async(engine.RunTask, "_finish", "storing asked", "stored")


async def _application(scope, receive, send):
    if scope["type"] != "http" or scope["path"] != CHAT_PATH:
        return await _served(scope, receive, send)
    _marks.clear()
    mark("arrived")

    async def sent(message):
        if message["type"] == "http.response.start":
            mark("response headers sent")
        elif message.get("body"):
            body = message["body"]
            mark("session frame sent")
            if b'"type": "chunk"' in body or b'"type":"chunk"' in body:
                mark("first text frame sent")
            if b'"type": "done"' in body or b'"type":"done"' in body:
                mark("done frame sent")
        await send(message)

    try:
        await _served(scope, receive, sent)
    finally:
        start = _marks["arrived"]
        with open(PATH, "a") as out:
            out.write(json.dumps({name: (at - start) * 1000 for name, at in _marks.items()}) + "\n")


_served = asgi.application
_install()
asgi.application = _application
