"""Attachments (issue 26 point 1, docs/design.md#attachments): `POST /api/v1/uploads` keeps an image, a PDF, a
Word file or plain text, the type read from the content; a document's text is extracted with a
cap; hostile files (a zip bomb, a PDF with JavaScript, polyglots, 0 bytes, names with `../`, RTL
marks or 300 characters, a flood) are refused or made harmless; a file is served only to its
owner and removed with its conversation. Real files, built here with the libraries that read
them (pypdf, python-docx)."""
import io
import json
import zipfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from chat_app.conversations.uploads import DOCX, name_safe
from chat_app.models import Conversation, Upload
from testkit.documents import docx_with, gif_declaring, jpeg_declaring, pdf_with, png_declaring, webp_declaring

pytestmark = [pytest.mark.django_db, pytest.mark.embedded]

PNG = bytes.fromhex("89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
                    "0000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082")


@pytest.fixture(autouse=True)
def media(settings, tmp_path):
    settings.MEDIA_ROOT = str(tmp_path / "media")
    return tmp_path / "media"


def _client(token_for, user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token_for(user)}")
    return client


def _post(client, name: str, data: bytes, content_type: str = "application/octet-stream"):
    return client.post("/api/v1/uploads", {"file": SimpleUploadedFile(name, data, content_type=content_type)},
                       format="multipart")


def test_each_kind_is_kept_with_the_type_its_content_has(user, token_for):
    client = _client(token_for, user)
    cases = [
        ("通知.png", PNG, "image/png", ""),
        ("考试安排.pdf", pdf_with("Final exam: June 18"), "application/pdf", "Final exam: June 18"),
        ("选课.docx", docx_with("第一周选课", "第二周退课"), DOCX, "第一周选课\n第二周退课\n周一\t高数"),
        ("笔记.md", "# 标题\n内容".encode(), "text/markdown", "# 标题\n内容"),
        ("成绩.csv", "\ufeff课程,分数\n高数,95".encode(), "text/csv", "课程,分数\n高数,95"),
    ]
    for name, data, content_type, text in cases:
        answer = _post(client, name, data, content_type="text/html")  # what the client claims counts for nothing
        assert answer.status_code == 201, (name, answer.content)
        body = answer.json()
        assert (body["name"], body["content_type"], body["size"]) == (name, content_type, len(data))
        upload = Upload.objects.get(id=body["id"])
        assert upload.text.strip() == text and upload.text_cut is False
        assert upload.file.read() == data


def test_a_long_document_is_cut_and_says_so(user, token_for, settings):
    settings.UPLOAD_TEXT_MAX_CHARS = 50
    answer = _post(_client(token_for, user), "长.txt", ("很长的文字" * 100).encode())
    upload = Upload.objects.get(id=answer.json()["id"])
    assert len(upload.text) == 50 and upload.text_cut is True and answer.json()["text_cut"] is True


@pytest.mark.parametrize(("name", "data", "status"), [
    ("空.txt", b"", 400),
    ("程序.exe", b"MZ\x90\x00" + b"\x00" * 200, 415),
    ("压缩.zip", b"PK\x03\x04" + b"\x00" * 100, 415),  # a zip that is no Word file
    ("网页.html", b"<html><script>alert(1)</script></html>", 415),  # text, but not a kind we take
    ("伪装.txt", PNG + b"<?php system($_GET[c]); ?>", 201),  # a polyglot is what its first bytes say
    ("无头.png", PNG[:8] + b"<?php system($_GET[c]); ?>", 400),  # an image with no size is no image
    ("二进制.txt", b"abc\x00def", 415),
    ("乱码.txt", b"\xff\xfe\xfa not utf-8", 415),
    ("坏的.pdf", b"%PDF-1.4\n garbage that is no PDF", 400),
])
def test_what_is_not_a_file_we_take_is_refused(user, token_for, name, data, status):
    answer = _post(_client(token_for, user), name, data)
    assert answer.status_code == status, answer.content
    if status != 201:
        assert answer.json()["message"] and not Upload.objects.exists()
    else:
        assert Upload.objects.get().content_type == "image/png"


def test_a_docx_zip_bomb_is_refused_unpacked(user, token_for):
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        archive.writestr("word/document.xml", "<w:document/>")
        archive.writestr("word/bomb.xml", b"\x00" * (60 * 1024 * 1024))  # 60 MB of zeros, ~60 KB packed
    data = out.getvalue()
    assert len(data) < 200 * 1024
    answer = _post(_client(token_for, user), "bomb.docx", data)
    assert answer.status_code == 400 and "压缩结构异常" in answer.json()["message"]


def test_a_pdf_with_javascript_gives_its_text_and_nothing_runs(user, token_for):
    answer = _post(_client(token_for, user), "evil.pdf", pdf_with("Hello", javascript=True))
    assert answer.status_code == 201
    assert Upload.objects.get().text.strip() == "Hello"


# Each format's header, declaring a square of the side given (a lossy or lossless WebP says at
# most 16,383).
DECLARING = {
    "png": (png_declaring, 20000),
    "jpeg": (jpeg_declaring, 20000),
    "gif": (gif_declaring, 20000),
    "webp-lossy": (lambda width, height: webp_declaring(width, height, "VP8 "), 16000),
    "webp-lossless": (lambda width, height: webp_declaring(width, height, "VP8L"), 16000),
    "webp-extended": (lambda width, height: webp_declaring(width, height, "VP8X"), 20000),
    "gif-frame-past-its-screen": (lambda width, height: gif_declaring(10, 10, frame=(0, 0, width, height)), 20000),
}


@pytest.mark.parametrize(("make", "side"), DECLARING.values(), ids=DECLARING.keys())
def test_an_image_over_the_pixel_cap_is_refused_from_its_header(user, token_for, make, side):
    """Issue 42: a few bytes declaring 20,000 × 20,000 were kept and sent to the model."""
    client = _client(token_for, user)
    answer = _post(client, "大图", make(side, side))
    assert answer.status_code == 413 and answer.json() == {
        "code": 41301, "message": f"图片的宽 × 高不能超过 50,000,000 像素（这张是 {side} × {side}）。"}
    assert _post(client, "照片", make(8000, 6000)).status_code == 201  # a 48 MP phone photo
    assert Upload.objects.count() == 1


def test_an_image_whose_size_cannot_be_read_is_refused(user, token_for):
    client = _client(token_for, user)
    tiny_blocks = gif_declaring(10, 10)[:-3] + b"\x01\x00" * 200_000 + b"\x00;"  # 400 KB of one-byte sub-blocks
    for name, data in [("截断.png", PNG[:20]), ("截断.jpg", jpeg_declaring(10, 10)[:30]), ("碎块.gif", tiny_blocks)]:
        answer = _post(client, name, data)
        assert answer.status_code == 400 and "无法读取" in answer.json()["message"], (name, answer.content)
    assert not Upload.objects.exists()


def test_names_are_made_harmless():
    assert name_safe("../../etc/passwd") == "passwd"
    assert name_safe("C:\\Users\\a\\课表.pdf") == "课表.pdf"
    assert name_safe("invoice\u202egpj.exe") == "invoicegpj.exe"  # no RTL override to reverse the extension
    assert name_safe("a\x00b\nc.txt") == "ab c.txt"  # a line break shows as a space, as in every label
    # A ZWJ emoji sequence is kept (Django's multipart parser drops every non-printable character
    # of a name it reads, ZWJ among them, before this).
    assert name_safe("\u2066课表\u2069\u2028👩\u200d💻.txt") == "课表 👩\u200d💻.txt"
    long = name_safe("很" * 300 + ".pdf")
    assert len(long) == 100 and long.endswith(".pdf")
    assert name_safe("") == name_safe("...") == name_safe(None) == "附件"


def test_size_rate_and_quota_are_capped(user, token_for, settings):
    client = _client(token_for, user)
    settings.UPLOAD_MAX_BYTES = 1024
    too_big = _post(client, "大.txt", b"a" * 1025)
    assert too_big.status_code == 413 and "1 KB" in too_big.json()["message"]
    settings.UPLOAD_MAX_BYTES = 10 * 1024 * 1024
    settings.UPLOAD_RATE_PER_MINUTE = 3
    assert [_post(client, f"{i}.txt", b"x").status_code for i in range(4)] == [201, 201, 201, 429]
    flood = _post(client, "5.txt", b"x")
    assert flood.status_code == 429 and flood.json()["code"] == 42906 and flood["Retry-After"] == "60"
    Upload.objects.all().delete()
    settings.UPLOAD_RATE_PER_MINUTE, settings.UPLOAD_USER_MAX_BYTES = 100, 10
    assert _post(client, "a.txt", b"x" * 8).status_code == 201
    over = _post(client, "b.txt", b"x" * 8)
    assert over.status_code == 429 and over.json()["code"] == 42907


def test_a_file_is_served_to_its_owner_only_and_goes_with_its_conversation(user, other_user, token_for, media):
    mine, theirs = _client(token_for, user), _client(token_for, other_user)
    image = Upload.objects.get(id=_post(mine, "图.png", PNG).json()["id"])
    document = Upload.objects.get(id=_post(mine, "说明.txt", "说明".encode()).json()["id"])
    shown = mine.get(f"/api/v1/uploads/{image.id}")
    assert shown.status_code == 200 and shown.content == PNG
    assert shown["Content-Type"] == "image/png" and shown["X-Content-Type-Options"] == "nosniff"
    assert "sandbox" in shown["Content-Security-Policy"] and shown["Content-Disposition"].startswith("inline")
    assert mine.get(f"/api/v1/uploads/{document.id}")["Content-Disposition"].startswith("attachment")
    assert theirs.get(f"/api/v1/uploads/{image.id}").status_code == 404
    assert APIClient().get(f"/api/v1/uploads/{image.id}").status_code == 401

    conversation = Conversation.objects.create(user=user, title="附件")
    Upload.objects.filter(id=image.id).update(conversation=conversation)
    path = media / image.file.name
    assert path.exists()
    conversation.delete()
    assert not Upload.objects.filter(id=image.id).exists() and not path.exists()


def test_my_data_lists_the_uploads_and_deleting_everything_takes_them(user, token_for, media):
    client = _client(token_for, user)
    sent = Upload.objects.get(id=_post(client, "发过的.txt", b"a").json()["id"])
    unsent = Upload.objects.get(id=_post(client, "没发的.txt", b"b").json()["id"])
    conversation = Conversation.objects.create(user=user, title="附件")
    Upload.objects.filter(id=sent.id).update(conversation=conversation)
    listed = json.loads(client.get("/api/v1/me/export").content)["uploads"]
    assert [(u["name"], u["conversation_id"]) for u in listed] == [("发过的.txt", str(conversation.id)),
                                                                  ("没发的.txt", None)]
    assert client.delete("/api/v1/me/conversations").status_code == 200
    assert not Upload.objects.exists()
    assert not (media / sent.file.name).exists() and not (media / unsent.file.name).exists()


@pytest.fixture
def s3_storage(settings):
    """Django's default storage on an S3 API: moto's server mode on loopback (a real HTTP S3
    endpoint, which django-storages and boto3 speak to as to campus storage)."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    keys = {"aws_access_key_id": "campus", "aws_secret_access_key": "campus-secret", "region_name": "us-east-1"}
    client = boto3.client("s3", endpoint_url=endpoint, **keys)
    client.create_bucket(Bucket="campus-uploads")
    settings.STORAGES = {
        "default": {"BACKEND": "storages.backends.s3.S3Storage", "OPTIONS": {
            "bucket_name": "campus-uploads", "endpoint_url": endpoint, "access_key": "campus",
            "secret_key": "campus-secret", "region_name": "us-east-1", "default_acl": "private",
            "file_overwrite": False}},
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
    try:
        yield client
    finally:
        server.stop()


def test_attachments_live_in_s3_compatible_storage_when_configured(user, token_for, s3_storage):
    client = _client(token_for, user)
    answer = _post(client, "课表.png", PNG)
    assert answer.status_code == 201
    upload = Upload.objects.get(id=answer.json()["id"])
    [stored] = s3_storage.list_objects_v2(Bucket="campus-uploads")["Contents"]
    assert stored["Key"] == upload.file.name and stored["Size"] == len(PNG)
    assert client.get(f"/api/v1/uploads/{upload.id}").content == PNG
    conversation = Conversation.objects.create(user=user, title="附件")
    Upload.objects.filter(id=upload.id).update(conversation=conversation)
    conversation.delete()
    assert s3_storage.list_objects_v2(Bucket="campus-uploads").get("KeyCount") == 0


def test_uploads_never_sent_are_purged_after_a_day_by_the_retention_command(user, token_for, media):
    from datetime import timedelta
    from io import StringIO

    from django.core.management import call_command
    from django.utils import timezone

    client = _client(token_for, user)
    old = Upload.objects.get(id=_post(client, "旧.txt", b"a").json()["id"])
    fresh = Upload.objects.get(id=_post(client, "新.txt", b"b").json()["id"])
    sent = Upload.objects.get(id=_post(client, "发过.txt", b"c").json()["id"])
    conversation = Conversation.objects.create(user=user, title="附件")
    Upload.objects.filter(id=sent.id).update(conversation=conversation)
    Upload.objects.filter(id__in=[old.id, sent.id]).update(created_at=timezone.now() - timedelta(days=2))
    out = StringIO()
    call_command("purge_conversations", "--older-than", "30", stdout=out)
    assert "1 个一天前上传却没有发送的附件" in out.getvalue()
    assert set(Upload.objects.values_list("id", flat=True)) == {fresh.id, sent.id}
    assert not (media / old.file.name).exists()
