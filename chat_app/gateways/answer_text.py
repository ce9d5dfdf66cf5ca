"""An answer's text as clients outside the page read it (`/v1`, A2A artifacts, the MCP server's
answer): the model's text before a tool call and its text after it are two paragraphs, as the page
shows them (a segment of its own below the tool's chip, static/js/view.js; its copy button joins
the segments with a blank line). Without the break "好的，我查一下。" + a tool + "今天食堂…" read
"…查一下。今天食堂…" (docs/clients.md).

The run's chunks carry no break (a turn's `done.full_text` is every round's text end to end), so
the gateways put it in, each from the same frames, through one `AnswerText`.
"""
from dataclasses import dataclass

PARAGRAPH_BREAK = "\n\n"


@dataclass
class AnswerText:
    text: str = ""  # the answer so far, breaks included: what went out
    streamed: str = ""  # the run's own chunks, end to end (as `done.full_text` holds them)
    _break_due: bool = False

    def paragraph_break(self) -> None:
        """What comes next starts a paragraph (after a tool call, or a notice): a blank line
        before it, if any text came before."""
        self._break_due = bool(self.text)

    def piece(self, text: str) -> str:
        """`text` as it goes out: after a break its leading newlines give way to the blank line
        (as many newlines as the answer's end lacks); "" while a break waits for text."""
        if self._break_due:
            text = text.lstrip("\n")
            if not text:
                return ""
            ending = len(self.text) - len(self.text.rstrip("\n"))
            text = PARAGRAPH_BREAK[min(ending, len(PARAGRAPH_BREAK)):] + text
            self._break_due = False
        self.text += text
        return text

    def chunk(self, content: str) -> str:
        """A `chunk` frame's content, as it goes out."""
        self.streamed += content
        return self.piece(content)

    def rest(self, full_text: str) -> str:
        """What `done.full_text` holds beyond the chunks (a keyword-routed answer's text no chunk
        carried, a cut turn's closing text), as it goes out; "" when nothing."""
        if full_text.startswith(self.streamed) and len(full_text) > len(self.streamed):
            return self.chunk(full_text[len(self.streamed):])
        return ""

    @classmethod
    def of_rounds(cls, texts) -> str:
        """The answer of stored rounds (a tool call between each and the next), joined."""
        answer = cls()
        for text in texts:
            answer.piece(text)
            answer.paragraph_break()
        return answer.text
