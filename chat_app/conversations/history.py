"""What the model is sent of a conversation (docs/design.md#the-tool-loop): its stored messages in OpenAI's format, and
a question's attachments as content parts (docs/design.md#attachments):

- A document (PDF, DOCX, text): its extracted text, headed by its file name (and marked when the
  text was cut at UPLOAD_TEXT_MAX_CHARS; a document with no text, a scanned PDF, says so).
- An image: an `image_url` part (a data: URL of its bytes) when the agent reads images
  (`Agent.reads_images`), else a line telling the model the file name and that it cannot see it.
- Only the latest question carries its files in full; an earlier question with attachments names
  them (the model's answer to it is in the history): resending every file of the window on every
  turn would multiply what each turn costs.
"""
import base64

from agents_app.runtime.reasoning import assistant_calls_message
from chat_app.models import Conversation, Message, Upload

TEXT_HEAD = "附件《{name}》的内容{cut}：\n{text}"
NO_TEXT = "附件《{name}》没有可读的文字（可能是扫描件或图片）。"
IMAGE_HEAD = "附件《{name}》是一张图片："
IMAGE_UNSEEN = "学生附了一张图片《{name}》，但你不能查看图片：请告诉学生当前模型看不到图片，可以把图片里的文字发给你。"
EARLIER = "（这条消息附有：{names}）"


def attachment_content(text: str, uploads: list, *, images: bool) -> list[dict]:
    """The content parts of a question with its `uploads` (Upload rows, in the order sent)."""
    parts = [{"type": "text", "text": text}]
    for upload in uploads:
        if upload.is_image:
            if images:
                data = base64.b64encode(upload.file.open("rb").read()).decode("ascii")
                parts.append({"type": "text", "text": IMAGE_HEAD.format(name=upload.name)})
                parts.append({"type": "image_url", "image_url": {"url": f"data:{upload.content_type};base64,{data}"}})
            else:
                parts.append({"type": "text", "text": IMAGE_UNSEEN.format(name=upload.name)})
        elif upload.text.strip():
            parts.append({"type": "text", "text": TEXT_HEAD.format(name=upload.name, text=upload.text,
                                                                   cut="（过长，已截断）" if upload.text_cut else "")})
        else:
            parts.append({"type": "text", "text": NO_TEXT.format(name=upload.name)})
    return parts


def attachments_named(text: str, attached: list[dict]) -> str:
    """An earlier question's text with the names of what it had attached."""
    names = "、".join(f"《{a.get('name', '')}》" for a in attached if isinstance(a, dict))
    return f"{text}\n{EARLIER.format(names=names)}" if names else text


def _openai_message(message: Message) -> dict | None:
    if message.role == Message.Role.TOOL:
        return {"role": "tool", "tool_call_id": message.meta.get("tool_call_id", ""), "content": message.content}
    if message.role == Message.Role.ASSISTANT:
        tool_calls = message.meta.get("tool_calls")
        if tool_calls:  # with the reasoning that led to the calls (docs/design.md#the-tool-loop)
            reasoning = message.meta.get("reasoning")
            return assistant_calls_message(text=message.content, calls=tool_calls,
                                           reasoning=reasoning if isinstance(reasoning, str) else "")
        if not message.content:
            return None  # an interrupted turn that said nothing tells the model nothing
        return {"role": "assistant", "content": message.content}
    return {"role": "user", "content": message.content}


def history_build(*, conversation: Conversation, limit: int, images: bool = False) -> list[dict]:
    """The last `limit` stored messages in OpenAI format, oldest first (docs/design.md#the-tool-loop).

    The window never starts inside an assistant-tool_calls/tool group: a leading `tool` row whose
    assistant `tool_calls` row fell outside the window is dropped, since the API rejects a tool
    message that answers no call. The system prompt is put first by the runtime. The latest
    question's attachments are content parts (chat_app/conversations/history.py; `images`: the agent reads
    images); an earlier question names its attachments.
    """
    rows = list(
        # A turn set aside by regenerate / edit is an earlier version, not something that was said.
        Message.objects.filter(conversation=conversation, superseded=False).order_by("-created_at", "-seq")[
            : max(limit, 0)
        ]
    )
    rows.reverse()
    # A question the word lists blocked never reaches the model, nor does the fixed answer it got
    # (the turn's rows share its request id: docs/design.md#content-safety-and-labels).
    blocked = {row.request_id for row in rows if row.role == Message.Role.USER and row.meta.get("blocked") and row.request_id}
    rows = [row for row in rows if row.request_id not in blocked]
    while rows and rows[0].role == Message.Role.TOOL:
        rows.pop(0)
    messages = [(row, _openai_message(row)) for row in rows]
    asked = [row for row in rows if row.role == Message.Role.USER]
    for row, message in messages:
        attached = row.meta.get("attachments") if row.role == Message.Role.USER and message else None
        if attached:
            message["content"] = (_attached_content(row, attached, images=images) if row is asked[-1]
                                  else attachments_named(row.content, attached))
    return [m for _, m in messages if m is not None]


def _attached_content(row: Message, attached: list[dict], *, images: bool) -> list[dict]:
    ids = [a.get("id") for a in attached if isinstance(a, dict)]
    found = {str(u.id): u for u in Upload.objects.filter(conversation_id=row.conversation_id, id__in=ids)}
    return attachment_content(row.content, [found[i] for i in ids if i in found], images=images)
