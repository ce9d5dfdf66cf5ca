"""What an MCP tool result becomes: text for the model, links and images for the page.

- `structuredContent` (validated against the tool's `outputSchema` by the mcp SDK itself: a
  mismatch raises in `call_tool`, see `output_invalid_reason`) reaches the model as JSON text.
  When the text parts already say the same (the spec asks servers to send the serialized JSON
  as text too; the SDK's own servers send a wrapped `{"result": x}` as the text of `x`), the
  text is kept as it is.
- `resource_link`s are described to the model and given to the page as links (http/https only).
- images are described to the model; from a service staff marked trusted they are also given
  to the page as `data:` URLs (raster types only, size-capped), shown in the tool's chip.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")  # no SVG: it is a document
IMAGE_MAX_BYTES = 512 * 1024
IMAGES_MAX = 4
LINKS_MAX = 10
LINK_SCHEMES = ("http://", "https://")
_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")

IMAGE_SHOWN_TEXT = "[图片 {mime}，约 {size} 字节，已显示给用户，未转给模型]"
IMAGE_HIDDEN_TEXT = "[{label} {mime}，约 {size} 字节，未转给模型]"
LINK_TEXT = "[资源链接 {name}: {uri}]"
OUTPUT_INVALID_TEXT = "MCP 工具“{tool}”返回的结构化结果不符合它声明的输出格式（outputSchema）：{reason}"


@dataclass(frozen=True, slots=True)
class McpResultParts:
    text: str
    links: list[dict] = field(default_factory=list)
    images: list[dict] = field(default_factory=list)


def output_invalid_reason(exc: BaseException) -> str | None:
    """The reason when `exc` is the SDK's refusal of a result that breaks the tool's
    `outputSchema` (mcp 2.3 `ClientSession.validate_tool_result` raises RuntimeError, from a
    jsonschema error or because structured content is missing), else None."""
    if not isinstance(exc, RuntimeError):
        return None
    from jsonschema.exceptions import ValidationError

    if isinstance(exc.__cause__, ValidationError):
        return exc.__cause__.message
    text = str(exc)
    if "output schema" in text and "structured content" in text:
        return "没有返回结构化结果"
    if text.startswith("Invalid schema for tool"):
        return "输出格式本身无效"
    return None


def _same_as_text(structured, text: str) -> bool:
    candidates = [structured]
    if isinstance(structured, dict) and list(structured) == ["result"]:
        candidates.append(structured["result"])  # the SDK's wrapped primitive
    for candidate in candidates:
        if isinstance(candidate, str) and candidate == text:
            return True
        try:
            if json.loads(text) == candidate:
                return True
        except ValueError:
            continue
    return False


def _link(block) -> dict | None:
    uri = str(block.uri)
    if not uri.lower().startswith(LINK_SCHEMES):
        return None
    return {"uri": uri, "name": (block.title or block.name or uri)[:200]}


def _image(block) -> dict | None:
    data = block.data or ""
    if block.mime_type not in IMAGE_TYPES or len(data) * 3 // 4 > IMAGE_MAX_BYTES or not _BASE64.fullmatch(data):
        return None
    return {"src": f"data:{block.mime_type};base64,{data}"}


def mcp_result_parts(result, *, trusted: bool) -> McpResultParts:
    """The model's text (text parts joined with newlines, other parts described) and what the
    page may show (see the module docstring)."""
    texts: list[str] = []
    others: list[str] = []
    links: list[dict] = []
    images: list[dict] = []
    for block in result.content:
        kind = getattr(block, "type", "")
        if kind == "text":
            texts.append(block.text)
        elif kind in ("image", "audio"):
            size = len(block.data) * 3 // 4
            image = _image(block) if kind == "image" and trusted and len(images) < IMAGES_MAX else None
            if image is not None:
                images.append(image)
                others.append(IMAGE_SHOWN_TEXT.format(mime=block.mime_type, size=size))
            else:
                label = "图片" if kind == "image" else "音频"
                others.append(IMAGE_HIDDEN_TEXT.format(label=label, mime=block.mime_type, size=size))
        elif kind == "resource_link":
            others.append(LINK_TEXT.format(name=block.name, uri=block.uri))
            link = _link(block) if len(links) < LINKS_MAX else None
            if link is not None:
                links.append(link)
        elif kind == "resource":
            res = block.resource
            text = getattr(res, "text", None)
            others.append(text if text is not None else f"[资源 {res.uri}，{res.mime_type or '二进制'}，未转给模型]")
        else:
            others.append(f"[{kind or '未知'} 内容，未转给模型]")
    structured = result.structured_content
    joined = "\n".join(texts)
    if structured is not None and not (texts and _same_as_text(structured, joined)):
        # The structured result is the tool's answer: the model reads it whole, as JSON.
        texts = [json.dumps(structured, ensure_ascii=False), *texts]
    parts = [*texts, *others]
    return McpResultParts(text="\n".join(parts), links=links, images=images)
