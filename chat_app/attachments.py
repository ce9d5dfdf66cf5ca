"""What the model is sent of a question's attachments (DESIGN §4c): the content parts of the
user message.

- A document (PDF, DOCX, text): its extracted text, headed by its file name (and marked when the
  text was cut at UPLOAD_TEXT_MAX_CHARS; a document with no text, a scanned PDF, says so).
- An image: an `image_url` part (a data: URL of its bytes) when the agent reads images
  (`Agent.reads_images`), else a line telling the model the file name and that it cannot see it.
- Only the latest question carries its files in full; an earlier question with attachments names
  them (the model's answer to it is in the history): resending every file of the window on every
  turn would multiply what each turn costs.
"""
import base64

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
