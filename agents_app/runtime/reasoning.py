"""A thinking model's reasoning, kept apart from its answer (docs/design.md#the-tool-loop, Thinking models).

Reasoning arrives in one of three forms:

- `delta.reasoning_content` (DashScope Qwen3 in thinking mode, DeepSeek's reasoner, vLLM with a
  reasoning parser);
- `delta.reasoning` (newer vLLM, Ollama, OpenRouter); a server in between sends both with the
  same text, so the first one present is read, never both;
- no field at all: a server without a reasoning parser (vLLM without `--reasoning-parser`, an
  older Ollama) streams the model's raw `<think>…</think>` at the start of `content`.

`ThinkSplitter` reads the third form. Only a *leading* block is reasoning (whitespace before it
allowed): a `<think>` further on is the answer's own text (a student asking about the tag). The
tags may be split across chunks anywhere; a block still open when the answer ends is all
reasoning (the model stopped while thinking, or went straight to a tool call).

Reasoning is never sent back as content. One exception, which the providers require: the
reasoning of a round that called tools goes back as `reasoning_content` on that assistant
message, in the turn's next requests and in every later turn's history (DeepSeek V4 and Kimi K2 in
thinking mode answer HTTP 400 "The `reasoning_content` in the thinking mode must be passed back
to the API." otherwise). `reasoning_sent_back` shapes that per provider: a provider set not to
receive it (a server that refuses the field) gets the messages without it."""
from __future__ import annotations

OPEN_TAG, CLOSE_TAG = "<think>", "</think>"
REASONING, CONTENT = "reasoning", "content"


def delta_reasoning(delta: dict) -> str:
    """The reasoning text of one streamed `delta` ("" when it has none, or not as text)."""
    for key in ("reasoning_content", "reasoning"):
        value = delta.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def _tag_prefix_len(text: str, tag: str) -> int:
    """The length of the longest end of `text` that is the start of `tag` (a tag cut by a chunk
    boundary)."""
    for size in range(min(len(text), len(tag) - 1), 0, -1):
        if text.endswith(tag[:size]):
            return size
    return 0


class ThinkSplitter:
    """Splits a stream of `content` deltas into reasoning and answer pieces.

    `feed(text)` and, once the stream ends, `end()` return `(kind, text)` pieces, `kind` being
    REASONING or CONTENT, in stream order; text that might still turn out to be part of a tag
    is held back until the next delta (or `end()`) decides it."""

    _START, _THINKING, _AFTER, _ANSWER = range(4)

    def __init__(self) -> None:
        self._state = self._START
        self._held = ""

    @property
    def answering(self) -> bool:
        """The answer has begun (no reasoning can follow in `content` any more)."""
        return self._state == self._ANSWER

    def feed(self, text: str) -> list[tuple[str, str]]:
        if self._state == self._ANSWER:
            return [(CONTENT, text)] if text else []
        pieces: list[tuple[str, str]] = []
        text, self._held = self._held + text, ""
        while text:
            if self._state == self._START:
                lead = text.lstrip()
                if lead.startswith(OPEN_TAG):
                    self._state, text = self._THINKING, lead[len(OPEN_TAG):]
                elif not lead or OPEN_TAG.startswith(lead):
                    self._held = text  # whitespace, or a tag not complete yet
                    return pieces
                else:
                    self._state = self._ANSWER
                    return [*pieces, (CONTENT, text)]
            elif self._state == self._THINKING:
                end = text.find(CLOSE_TAG)
                if end >= 0:
                    if end:
                        pieces.append((REASONING, text[:end]))
                    self._state, text = self._AFTER, text[end + len(CLOSE_TAG):]
                    continue
                keep = _tag_prefix_len(text, CLOSE_TAG)
                if len(text) > keep:
                    pieces.append((REASONING, text[: len(text) - keep]))
                self._held = text[len(text) - keep:]
                return pieces
            else:  # _AFTER: the blank lines a model writes between its thinking and its answer
                text = text.lstrip()
                if text:
                    self._state = self._ANSWER
                    pieces.append((CONTENT, text))
                return pieces
        return pieces

    def end(self) -> list[tuple[str, str]]:
        """The held text, decided: a half-written opening tag was the answer's text; the end of
        an unclosed block is reasoning."""
        held, self._held = self._held, ""
        if not held:
            return []
        if self._state == self._START:
            return [] if not held.strip() else [(CONTENT, held)]
        if self._state == self._THINKING:
            return [(REASONING, held)]
        return []


def think_stripped(text: str) -> str:
    """`text` without a leading `<think>…</think>` block: a reply stored before reasoning was kept
    apart still carries it, and must not go back to the model with the history."""
    if OPEN_TAG not in text[:200]:
        return text
    splitter = ThinkSplitter()
    pieces = splitter.feed(text) + splitter.end()
    return "".join(piece for kind, piece in pieces if kind == CONTENT)


def assistant_calls_message(*, text: str, calls: list[dict], reasoning: str = "") -> dict:
    """An assistant message that called tools, as the model is sent it back: its text, its calls,
    and the reasoning that led to them as `reasoning_content` (DeepSeek V4 and Kimi K2 in thinking
    mode refuse a request where a tool round's reasoning is missing; a provider that refuses the
    field has it removed, runtime/providers.py). Never as content: docs/design.md#the-tool-loop."""
    message = {"role": "assistant", "content": text or None, "tool_calls": calls}
    if reasoning:
        message["reasoning_content"] = reasoning
    return message


def reasoning_sent_back(messages: list[dict], *, send_back: bool) -> list[dict]:
    """The turn's messages as one provider is sent them. With `send_back`, once any tool round
    carries its reasoning, every tool round does (an empty `reasoning_content` where the model
    called tools without reasoning: a thinking mode wants the field on each); without it, the
    field is removed. Messages without any reasoning are returned as they are (no copy)."""
    if not any(isinstance(m, dict) and "reasoning_content" in m for m in messages):
        return messages
    if not send_back:
        return [{k: v for k, v in m.items() if k != "reasoning_content"} if "reasoning_content" in m else m
                for m in messages]
    return [{**m, "reasoning_content": ""} if m.get("role") == "assistant" and m.get("tool_calls")
            and "reasoning_content" not in m else m for m in messages]
