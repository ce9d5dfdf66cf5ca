"""What a demo sub-agent answers: text pieces to stream, an optional chart, and its lookup."""
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class DemoAnswer:
    parts: list[str]  # streamed one `chunk` frame each; joined they are the full text
    chart: dict | None = None
    lookup: str = ""  # the data source consulted, shown as the sub-agent's own tool_call
    lookup_args: dict = field(default_factory=dict)

    @property
    def full_text(self) -> str:
        return "".join(self.parts)


def answer_from_lines(lines: list[str], **kwargs) -> DemoAnswer:
    """One chunk per line, so a reader sees the answer arrive the way a model streams it."""
    parts = [line + "\n" for line in lines[:-1]] + lines[-1:]
    return DemoAnswer(parts=parts, **kwargs)


def chart_bar(*, title: str, labels: list[str], label: str, data: list[float]) -> dict:
    """The chart shape the chat page draws with chart.js (see docs/demo.md)."""
    return {"type": "bar", "title": title, "labels": labels, "datasets": [{"label": label, "data": data}]}


def first_found(text: str, words) -> str | None:
    return next((word for word in words if word in text), None)
