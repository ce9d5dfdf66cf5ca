"""The knowledge base's data model (docs/design.md#the-knowledge-base)."""

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError

from knowledge_app.models import KnowledgeCollection, KnowledgeDocument

pytestmark = pytest.mark.django_db


def test_a_collections_tool_is_named_after_its_slug():
    assert KnowledgeCollection(slug="student-handbook").tool_name == "search_student_handbook"


@pytest.mark.parametrize("slug", ["Handbook", "1handbook", "h", "hand book", "手册", "a" * 42])
def test_a_slug_that_would_not_make_a_tool_name_is_refused(slug):
    with pytest.raises(ValidationError):
        KnowledgeCollection(slug=slug, name="x", description="x").full_clean()


def test_the_same_content_is_kept_once_per_collection():
    handbook = KnowledgeCollection.objects.create(slug="handbook", name="学生手册", description="学生手册")
    KnowledgeDocument.objects.create(collection=handbook, title="a", file="a.pdf", content_hash="0" * 64)
    with pytest.raises(IntegrityError):
        KnowledgeDocument.objects.create(collection=handbook, title="b", file="b.pdf", content_hash="0" * 64)


def test_a_collections_changes_are_kept_as_the_catalogs_are(admin_client):
    from django.urls import reverse

    collection = KnowledgeCollection.objects.create(slug="handbook", name="学生手册", description="旧说明")
    url = reverse("admin:knowledge_app_knowledgecollection_change", args=[collection.pk])
    response = admin_client.post(url, {"slug": "handbook", "name": "学生手册", "description": "新说明：转专业、请假",
                                       "enabled": "on"})
    assert response.status_code == 302
    assert [h.description for h in collection.history.order_by("history_id")] == ["旧说明", "新说明：转专业、请假"]
    history = admin_client.get(reverse("admin:knowledge_app_knowledgecollection_history", args=[collection.pk]))
    older = collection.history.order_by("history_id").first().history_id  # compared with, and rolled back to
    assert history.status_code == 200 and f"/history/{older}/" in history.content.decode()
