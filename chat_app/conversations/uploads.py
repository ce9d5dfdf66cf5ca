"""A student's attachments (docs/design.md#attachments): what an upload must be to be kept, and the text a document
gives the model.

- **The type is read from the content** (`filetype`'s signatures), never from the name or the
  client's Content-Type: PNG, JPEG, WebP and GIF images, PDF, DOCX; anything without a signature is
  plain text only when its name ends in .txt, .md or .csv and its bytes are UTF-8 with no NUL.
  Anything else is 415. A polyglot is what its first bytes say it is, and it is served as that
  type with `nosniff` (views/uploads.py).
- **Caps**: UPLOAD_MAX_BYTES per file (413; 0 bytes is 400); an image at most
  UPLOAD_IMAGE_MAX_PIXELS as its header declares (413; no readable header: 400); per student at
  most UPLOAD_RATE_PER_MINUTE uploads a minute and UPLOAD_USER_MAX_BYTES kept in all (429); a
  document's text at most UPLOAD_TEXT_MAX_CHARS characters (cut, and marked so), a PDF read for at
  most UPLOAD_PDF_MAX_PAGES pages. A PDF or DOCX is parsed in a child process under CPU, memory and
  time limits (campus_agent.base.documents: a zip bomb, a parse too costly, refused with the
  reason, 400). A PDF's scripts are never run: only its text is read.
- **The name** shown is the file's own, made harmless: no directories (`../`), no control,
  bidirectional or separator characters (label_clean), at most 100 characters (the extension kept).
"""
import hashlib
from datetime import timedelta

import filetype
from django.conf import settings
from django.core.files.base import ContentFile
from django.db.models import Sum
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from loguru import logger

from campus_agent.base import errors
from campus_agent.base.documents import REASONS, DocumentRefused, Extracted, document_text
from campus_agent.base.errors import INVALID_BODY
from campus_agent.base.text import label_clean
from campus_agent.base.windows import window_count
from chat_app.conversations.images import image_size
from chat_app.models import Upload

IMAGE_TYPES = {"image/png", "image/jpeg", "image/webp", "image/gif"}
PDF = "application/pdf"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
DOCUMENT_KINDS = {PDF: "pdf", DOCX: "docx"}  # parsed in a child process (campus_agent.base.documents)
TEXT_TYPES = {".txt": "text/plain", ".md": "text/markdown", ".csv": "text/csv"}
NAME_MAX = 100
TEXT_CUT_MARK = "\n…（附件文字过长，已截断）"

MSG_EMPTY = _("文件是空的。")
MSG_TOO_LARGE = _("文件不能超过 {limit}。")
MSG_TYPE = _("只能上传图片（PNG、JPEG、WebP、GIF）、PDF、Word（.docx）或纯文本（.txt、.md、.csv）文件。")
MSG_UNREADABLE = _("无法读取这个 {kind} 文件：{reason}")
MSG_RATE = _("上传太频繁了：每分钟最多 {limit} 个文件，请稍后再试。")
MSG_QUOTA = _("你的附件已占用 {used}，上限是 {limit}：请删除一些对话后再上传。")
MSG_IMAGE_PIXELS = _("图片的宽 × 高不能超过 {limit} 像素（这张是 {width} × {height}）。")
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


def _capped(text: str) -> Extracted:
    limit = settings.UPLOAD_TEXT_MAX_CHARS
    text = text.replace("\x00", "")
    return Extracted(text[:limit], True) if len(text) > limit else Extracted(text, False)


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


def _image_check(data: bytes, content_type: str) -> None:
    """An image's declared size, under UPLOAD_IMAGE_MAX_PIXELS (413), or 400 when it has none."""
    size = image_size(data, content_type)
    label = content_type.split("/")[1].upper()
    if size is None:
        logger.info("upload refused type={} reason=no-size", content_type)
        raise errors.invalid_body(MSG_UNREADABLE.format(kind=label, reason=REASONS["broken"]))
    width, height = size
    if width * height > settings.UPLOAD_IMAGE_MAX_PIXELS:
        logger.info("upload refused type={} reason=pixels width={} height={}", content_type, width, height)
        raise errors.ApiError(MSG_IMAGE_PIXELS.format(limit=f"{settings.UPLOAD_IMAGE_MAX_PIXELS:,}", width=width,
                                                      height=height), code=errors.BODY_TOO_LARGE, status=413)


def _extracted(data: bytes, content_type: str) -> Extracted:
    if content_type in DOCUMENT_KINDS:
        kind = DOCUMENT_KINDS[content_type]
        try:
            return document_text(data=data, kind=kind, max_chars=settings.UPLOAD_TEXT_MAX_CHARS,
                                 max_pages=settings.UPLOAD_PDF_MAX_PAGES)
        except DocumentRefused as exc:
            logger.info("upload refused type={} reason={}", content_type, exc.reason)
            message = MSG_UNREADABLE.format(kind="PDF" if kind == "pdf" else "Word", reason=exc.message)
            if exc.reason == "busy":  # the server's state, not the file's: try again
                raise errors.ApiError(message, code=errors.GENERAL, status=503, headers={"Retry-After": "10"}) from exc
            raise errors.ApiError(message, code=INVALID_BODY, status=400) from exc
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
    # Counted in the cache, not by reading the rows: two workers reading the same count would
    # both accept (docs/security.md#limits-across-workers). Every upload that gets this far counts.
    if window_count(f"upload:rate:{user.pk}", 60) > limit:
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
    if content_type in IMAGE_TYPES:
        _image_check(data, content_type)
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
