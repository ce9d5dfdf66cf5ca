"""A student's attachments (docs/design.md#attachments): what an upload must be to be kept, and the text a document
gives the model.

- **The type is read from the content** (`filetype`'s signatures), never from the name or the
  client's Content-Type: PNG, JPEG, WebP and GIF images, PDF, DOCX; anything without a signature is
  plain text only when its name ends in .txt, .md or .csv and its bytes are UTF-8 with no NUL.
  Anything else is 415. A polyglot is what its first bytes say it is, and it is served as that
  type with `nosniff` (views/uploads.py).
- **Caps**: UPLOAD_MAX_BYTES per file (413; 0 bytes is 400); per student at most
  UPLOAD_RATE_PER_MINUTE uploads a minute and UPLOAD_USER_MAX_BYTES kept in all (429); a
  document's text at most UPLOAD_TEXT_MAX_CHARS characters (cut, and marked so), a PDF read for at
  most UPLOAD_PDF_MAX_PAGES pages; a DOCX is a zip whose members are checked before it is parsed
  (at most 2,000 members, 50 MB uncompressed, a compression ratio of 200): a zip bomb is refused,
  not unpacked. A PDF's scripts are never run: only its text is read.
- **The name** shown is the file's own, made harmless: no directories (`../`), no control,
  bidirectional or separator characters (label_clean), at most 100 characters (the extension kept).
"""
import hashlib
import io
import zipfile
from dataclasses import dataclass
from datetime import timedelta

import filetype
from django.conf import settings
from django.core.files.base import ContentFile
from django.db.models import Sum
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from loguru import logger

from campus_agent.base import errors
from campus_agent.base.errors import INVALID_BODY
from campus_agent.base.text import label_clean
from chat_app.models import Upload

IMAGE_TYPES = {"image/png", "image/jpeg", "image/webp", "image/gif"}
PDF = "application/pdf"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
TEXT_TYPES = {".txt": "text/plain", ".md": "text/markdown", ".csv": "text/csv"}
NAME_MAX = 100
DOCX_MAX_MEMBERS = 2000
DOCX_MAX_UNPACKED = 50 * 1024 * 1024
DOCX_MAX_RATIO = 200
TEXT_CUT_MARK = "\n…（附件文字过长，已截断）"

MSG_EMPTY = _("文件是空的。")
MSG_TOO_LARGE = _("文件不能超过 {limit}。")
MSG_TYPE = _("只能上传图片（PNG、JPEG、WebP、GIF）、PDF、Word（.docx）或纯文本（.txt、.md、.csv）文件。")
MSG_UNREADABLE = _("无法读取这个 {kind} 文件：{reason}")
MSG_RATE = _("上传太频繁了：每分钟最多 {limit} 个文件，请稍后再试。")
MSG_QUOTA = _("你的附件已占用 {used}，上限是 {limit}：请删除一些对话后再上传。")
MSG_NO_FILE = _("请用 multipart/form-data 的 file 字段上传一个文件。")
UPLOAD_RATE_LIMITED = 42906
UPLOAD_QUOTA_EXCEEDED = 42907


def size_text(size: int) -> str:
    return f"{size / 1024 / 1024:.0f} MB" if size >= 1024 * 1024 else f"{size / 1024:.0f} KB"


FORM_OVERHEAD = 64 * 1024  # a multipart form's own bytes around the file


def upload_request_max() -> int:
    """The largest upload request: its file at UPLOAD_MAX_BYTES and the form around it. Past it the
    request is refused before it is read (campus_agent/intake.py)."""
    return settings.UPLOAD_MAX_BYTES + FORM_OVERHEAD


def upload_too_large_message(cap: int | None = None) -> str:
    """What a file over UPLOAD_MAX_BYTES is told (`cap`, the request's cap, is not the file's)."""
    return MSG_TOO_LARGE.format(limit=size_text(settings.UPLOAD_MAX_BYTES))


def name_safe(raw: str | None) -> str:
    """The file's name as it may be shown: its last path part, as a label
    (campus_agent.base.text.label_clean: no control, bidi or separator character; emoji kept), at
    most NAME_MAX characters with its extension kept; "附件" when nothing is left."""
    text = str(raw or "").replace("\\", "/").rsplit("/", 1)[-1]
    text = label_clean(text).strip(" .")
    if len(text) > NAME_MAX:
        stem, dot, extension = text.rpartition(".")
        extension = extension[:10] if dot and stem else ""
        text = text[:NAME_MAX - len(extension) - 1].rstrip() + "." + extension if extension else text[:NAME_MAX]
    return text or "附件"


class Unreadable(Exception):
    """A document refused for a reason the student is told (encrypted, a zip bomb)."""


@dataclass(frozen=True)
class Extracted:
    text: str
    cut: bool


def _capped(text: str) -> Extracted:
    limit = settings.UPLOAD_TEXT_MAX_CHARS
    text = text.replace("\x00", "")
    return Extracted(text[:limit], True) if len(text) > limit else Extracted(text, False)


def _pdf_text(data: bytes) -> Extracted:
    from pypdf import PdfReader  # the reader only when a PDF comes: it is a large import

    reader = PdfReader(io.BytesIO(data))
    if reader.is_encrypted and not reader.decrypt(""):
        raise Unreadable(_("文件已加密"))
    parts, total = [], 0
    for index, page in enumerate(reader.pages):
        if index >= settings.UPLOAD_PDF_MAX_PAGES or total > settings.UPLOAD_TEXT_MAX_CHARS:
            return Extracted(_capped("\n".join(parts)).text, True)
        piece = page.extract_text() or ""
        parts.append(piece)
        total += len(piece)
    return _capped("\n".join(parts))


def _docx_text(data: bytes) -> Extracted:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        members = archive.infolist()
        unpacked = sum(m.file_size for m in members)
        if len(members) > DOCX_MAX_MEMBERS or unpacked > DOCX_MAX_UNPACKED or any(
            m.compress_size and m.file_size / m.compress_size > DOCX_MAX_RATIO for m in members
        ):
            raise Unreadable(_("文件的压缩结构异常（解压后过大或条目过多）"))
    from docx import Document

    document = Document(io.BytesIO(data))
    lines = [p.text for p in document.paragraphs]
    for table in document.tables:
        lines.extend("\t".join(cell.text for cell in row.cells) for row in table.rows)
    return _capped("\n".join(line for line in lines if line))


def _sniffed(data: bytes, name: str) -> str:
    kind = filetype.guess(data)
    if kind is not None:
        if kind.mime in IMAGE_TYPES or kind.mime in (PDF, DOCX):
            return kind.mime
        raise errors.ApiError(MSG_TYPE, code=errors.UNSUPPORTED_MEDIA_TYPE, status=415)
    extension = "." + name.rpartition(".")[2].lower() if "." in name else ""
    if extension in TEXT_TYPES and b"\x00" not in data:
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            pass
        else:
            return TEXT_TYPES[extension]
    raise errors.ApiError(MSG_TYPE, code=errors.UNSUPPORTED_MEDIA_TYPE, status=415)


def _extracted(data: bytes, content_type: str) -> Extracted:
    kind = "PDF" if content_type == PDF else "Word"  # only these two are parsed, so only they fail
    try:
        if content_type == PDF:
            return _pdf_text(data)
        if content_type == DOCX:
            return _docx_text(data)
    except Exception as exc:  # noqa: BLE001 - whatever a broken or hostile file raises, it is refused
        reason = str(exc) if isinstance(exc, Unreadable) else _("文件已损坏或格式不对")
        logger.info("upload refused type={} reason={!r}", content_type, f"{type(exc).__name__}: {exc}"[:200])
        raise errors.ApiError(MSG_UNREADABLE.format(kind=kind, reason=reason), code=INVALID_BODY, status=400) from exc
    if content_type in TEXT_TYPES.values():
        return _capped(data.decode("utf-8-sig"))
    return Extracted("", False)


def _admit(user, size: int) -> None:
    """The student's rate and quota (429), and the file's size (413 / 400)."""
    if size <= 0:
        raise errors.invalid_body(MSG_EMPTY)
    if size > settings.UPLOAD_MAX_BYTES:
        raise errors.ApiError(upload_too_large_message(),
                              code=errors.BODY_TOO_LARGE, status=413)
    mine = Upload.objects.filter(user=user)
    limit = settings.UPLOAD_RATE_PER_MINUTE
    if mine.filter(created_at__gte=timezone.now() - timedelta(minutes=1)).count() >= limit:
        raise errors.ApiError(MSG_RATE.format(limit=limit), code=UPLOAD_RATE_LIMITED, status=429,
                              headers={"Retry-After": "60"})
    used = mine.aggregate(total=Sum("size"))["total"] or 0
    if used + size > settings.UPLOAD_USER_MAX_BYTES:
        raise errors.ApiError(MSG_QUOTA.format(used=size_text(used), limit=size_text(settings.UPLOAD_USER_MAX_BYTES)),
                              code=UPLOAD_QUOTA_EXCEEDED, status=429)


def upload_store(*, user, uploaded) -> Upload:
    """Keeps one uploaded file (Django's UploadedFile) for `user`, or raises ApiError (400 / 413 /
    415 / 429) and keeps nothing."""
    _admit(user, uploaded.size or 0)
    data = b"".join(uploaded.chunks())
    name = name_safe(uploaded.name)
    content_type = _sniffed(data, name)
    extracted = _extracted(data, content_type)
    upload = Upload(user=user, name=name, content_type=content_type, size=len(data),
                    sha256=hashlib.sha256(data).hexdigest(), text=extracted.text, text_cut=extracted.cut)
    upload.file.save(upload.id.hex, ContentFile(data), save=False)
    upload.save()
    logger.info("upload stored user={} id={} type={} size={} text_chars={} cut={}", user.pk, upload.id, content_type,
                len(data), len(extracted.text), extracted.cut)
    return upload


def upload_payload(upload: Upload) -> dict:
    """How an upload is named to its owner (the upload's answer, a question's `meta.attachments`)."""
    payload = {"id": str(upload.id), "name": upload.name, "content_type": upload.content_type, "size": upload.size}
    if upload.text_cut:  # the model reads only the first UPLOAD_TEXT_MAX_CHARS characters
        payload["text_cut"] = True
    return payload


def upload_get(*, user, upload_id) -> Upload | None:
    """The caller's own upload; None for anyone else's (404, never 403: it does not exist for them)."""
    return Upload.objects.filter(user=user, id=upload_id).first()


UNSENT_KEEP = timedelta(days=1)


def uploads_unsent_purge(*, dry_run: bool = False) -> int:
    """Deletes the uploads never sent with a question that are over a day old (a page closed
    with chips in its tray), files too; returns how many (or would, with `dry_run`). For cron,
    with purge_conversations."""
    stale = Upload.objects.filter(conversation__isnull=True, created_at__lt=timezone.now() - UNSENT_KEEP)
    count = stale.count()
    if not dry_run:
        for upload in stale.iterator():
            upload.delete()  # one by one: each takes its stored file (post_delete)
        logger.info("unsent uploads purged count={}", count)
    return count
