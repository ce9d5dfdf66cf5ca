"""Documents taken into a collection: the kind read from the content, the caps, the same content
once; from admin's upload of several files and from `manage.py knowledge_import`
(knowledge_app/ingest.py, docs/knowledge.md#adding-documents)."""

import io

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command
from django.urls import reverse
from docx import Document as DocxDocument

from knowledge_app import parsing
from knowledge_app.ingest import CONTENT_TYPES, DocumentRefused, document_add, document_kind
from knowledge_app.models import KnowledgeCollection, KnowledgeDocument

pytestmark = pytest.mark.django_db

MINIMAL_PDF = (b"%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj 2 0 obj<</Type/Pages/Kids[]/Count 0>>endobj\n"
               b"trailer<</Root 1 0 R>>\n%%EOF\n")


def _docx() -> bytes:
    document = DocxDocument()
    document.add_heading("第一章 总则", level=1)
    document.add_paragraph("第一条 为规范学生转专业工作，制定本规定。")
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


@pytest.fixture
def handbook(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path
    return KnowledgeCollection.objects.create(slug="handbook", name="学生手册", description="学生手册、转专业、请假")


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        (MINIMAL_PDF, parsing.PDF),  # whatever the name says
        (None, parsing.DOCX),
        ("# 第一章\n\n转专业……".encode(), parsing.MARKDOWN),
        ("<!DOCTYPE html><html><h1>宿舍</h1></html>".encode(), parsing.HTML),
        ("第一条 借书……".encode(), parsing.TEXT),
        ("第一条 借书……".encode("gb18030"), parsing.TEXT),  # an older Chinese file
    ],
)
def test_the_kind_is_read_from_the_content(data, kind):
    assert document_kind(data if data is not None else _docx()) == kind


@pytest.mark.parametrize(
    "data",
    [
        b"\x89PNG\r\n\x1a\n" + b"\x00" * 100,  # an image, whatever its name
        b"text\x00with NUL",
        b"MZ\x90\x00\x03",
    ],
)
def test_what_is_not_a_document_we_read_is_refused(data):
    with pytest.raises(DocumentRefused):
        document_kind(data)


def test_a_document_is_added_once_per_collection_and_waits_for_indexing(handbook):
    data = _docx()  # each build differs (its zip's times): the same bytes twice
    first = document_add(collection=handbook, name="转专业管理规定.docx", data=data)
    again = document_add(collection=handbook, name="另一个名字.docx", data=data)
    assert first.created and not again.created and again.document == first.document
    document = first.document
    assert (document.title, document.status, document.content_type, document.size) == (
        "转专业管理规定", KnowledgeDocument.Status.WAITING, CONTENT_TYPES[parsing.DOCX], len(data))
    assert document.file.read() == data and document.file.name.endswith(".docx")
    other = KnowledgeCollection.objects.create(slug="other", name="其他", description="其他")
    assert document_add(collection=other, name="x.docx", data=data).created  # per collection


def test_empty_and_too_large_files_are_refused(handbook, settings):
    settings.KNOWLEDGE_FILE_MAX_BYTES = 1000
    with pytest.raises(DocumentRefused, match="空"):
        document_add(collection=handbook, name="a.txt", data=b"")
    with pytest.raises(DocumentRefused, match="1000|0 MB"):
        document_add(collection=handbook, name="a.txt", data=b"a" * 1001)
    assert not KnowledgeDocument.objects.exists()


def test_a_hostile_name_becomes_a_clean_title_and_file_name(handbook):
    added = document_add(collection=handbook, name="../../etc/\u202eevil\u200b规定.txt", data="第一条".encode())
    assert added.document.title == "evil规定"
    assert "/" not in added.document.file.name.rpartition("knowledge/")[2].split("/", 2)[-1]


def test_staff_upload_several_files_at_once(admin_client, handbook):
    url = reverse("admin:knowledge_app_upload")
    assert admin_client.get(reverse("admin:knowledge_app_knowledgedocument_add")).url == url
    docx = _docx()
    files = [
        SimpleUploadedFile("转专业管理规定.docx", docx),
        SimpleUploadedFile("宿舍管理规定.md", "# 宿舍\n\n晚上十一点熄灯。".encode()),
        SimpleUploadedFile("重复.docx", docx),
        SimpleUploadedFile("图片.pdf", b"\x89PNG\r\n\x1a\n" + b"\x00" * 100),
    ]
    response = admin_client.post(url, {"collection": handbook.pk, "files": files}, follow=True)
    shown = [str(m) for m in response.context["messages"]]
    assert sorted(KnowledgeDocument.objects.values_list("title", flat=True)) == ["宿舍管理规定", "转专业管理规定"]
    assert any("没有重复加入" in m for m in shown) and any(m.startswith("图片.pdf：") for m in shown)


def test_a_student_cannot_upload(client, user, password, handbook):
    client.login(username=user.username, password=password)
    response = client.post(reverse("admin:knowledge_app_upload"),
                           {"collection": handbook.pk, "files": [SimpleUploadedFile("a.md", b"# a")]})
    assert response.status_code == 302 and "/login/" in response.url
    assert not KnowledgeDocument.objects.exists()


def test_the_import_command_makes_the_collection_and_skips_what_is_there(tmp_path, settings, capsys):
    settings.MEDIA_ROOT = tmp_path / "media"
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "转专业.docx").write_bytes(_docx())
    (folder / "宿舍.md").write_text("# 宿舍\n\n熄灯时间", encoding="utf-8")
    (folder / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 100)

    call_command("knowledge_import", str(folder), "--collection", "handbook", "--name", "学生手册",
                 "--description", "学生手册、转专业")
    out = capsys.readouterr()
    assert "collection handbook made" in out.out and "2 added, 0 already there, 1 refused" in out.out
    assert "《宿舍》: 1 passages" in out.out and "《转专业》: " in out.out  # indexed before it ends
    assert "logo.png: refused" in out.err
    call_command("knowledge_import", str(folder / "宿舍.md"), "--collection", "handbook")
    assert "0 added, 1 already there" in capsys.readouterr().out
    assert KnowledgeCollection.objects.get().name == "学生手册"
    with pytest.raises(CommandError):
        call_command("knowledge_import", str(folder / "logo.png"), "--collection", "Bad Slug")
