// Incremental Server-Sent Events parser for a fetch() body (EventSource cannot POST).
// Accepts what the SSE standard allows: CRLF / CR / LF line ends, `data:` with or without the
// space, comment lines (`: ping`), several `data:` lines joined by "\n". Frames that are not
// JSON objects are ignored, as docs/design.md#sub-agents asks of every parser. A frame's `id:` (a run's sequence
// number, docs/design.md#runs) is kept in `eventIds`, so a client can re-attach after the last one it has.

export const eventIds = new WeakMap(); // frame object → its SSE id (a string)

export class SseParser {
  constructor() {
    this.buffer = "";
    this.dataLines = [];
    this.eventId = null;
  }

  // Feeds decoded text; returns the JSON payloads completed by it, in order.
  push(text) {
    this.buffer += text;
    const events = [];
    for (;;) {
      const match = /\r\n|\r|\n/.exec(this.buffer);
      if (!match) break;
      // A lone "\r" at the very end may be the first half of "\r\n": wait for the next piece.
      if (match[0] === "\r" && match.index === this.buffer.length - 1) break;
      const line = this.buffer.slice(0, match.index);
      this.buffer = this.buffer.slice(match.index + match[0].length);
      const payload = this.line(line);
      if (payload !== undefined) events.push(payload);
    }
    return events;
  }

  line(line) {
    if (line === "") return this.dispatch();
    if (line.startsWith(":")) return undefined;
    const colon = line.indexOf(":");
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") this.dataLines.push(value);
    else if (field === "id" && !value.includes("\0")) this.eventId = value;
    return undefined;
  }

  dispatch() {
    if (this.dataLines.length === 0) return undefined;
    const data = this.dataLines.join("\n");
    this.dataLines = [];
    try {
      const payload = JSON.parse(data);
      if (!payload || typeof payload !== "object" || typeof payload.type !== "string") return undefined;
      if (this.eventId !== null) eventIds.set(payload, this.eventId);
      return payload;
    } catch {
      return undefined;
    }
  }
}

// Yields parsed frames from a fetch Response as they arrive.
export async function* sseFrames(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  const parser = new SseParser();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      yield* parser.push(value);
    }
    yield* parser.push("\n\n"); // a last frame without its blank line still counts
  } finally {
    reader.releaseLock();
  }
}
