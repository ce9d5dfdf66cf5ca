"""A knowledge base document's file, for the footnotes of an answer that cites it
(`GET /api/v1/knowledge/documents/<id>/file`, docs/knowledge.md#the-document-behind-a-footnote).

Only for a caller who may read its collection (agents_app.access: its groups), only while the
collection is enabled and the document searchable; anyone else gets the 404 a missing document
gets. A PDF opens in the browser (the footnote's `#page=N` goes to its page); every other kind is
downloaded, never rendered on our origin: an HTML document staff uploaded runs no script here.
"""
from django.http import HttpResponse
from django.utils.http import content_disposition_header
from django.utils.translation import gettext_lazy as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema

from agents_app.access import audience_of
from campus_agent.base import errors
from chat_app.gateways.api.base import ApiView
from chat_app.gateways.api.serializers import ErrorSerializer
from knowledge_app import parsing
from knowledge_app.ingest import CONTENT_TYPES
from knowledge_app.models import KnowledgeDocument

MSG_DOCUMENT_NOT_FOUND = _("文件不存在。")
INLINE = CONTENT_TYPES[parsing.PDF]


@extend_schema(
    tags=["knowledge"],
    summary="知识库文件原件（回答脚注打开；PDF 在浏览器中打开，其他类型下载）",
    responses={200: OpenApiResponse(OpenApiTypes.BINARY, description="文件原件"), 404: ErrorSerializer},
)
class KnowledgeDocumentFileView(ApiView):
    def get(self, request, document_id: int):
        document = (KnowledgeDocument.objects.select_related("collection")
                    .filter(pk=document_id, status=KnowledgeDocument.Status.READY, collection__enabled=True).first())
        if document is None or not audience_of(user=request.user).may_use(document.collection):
            raise errors.ApiError(MSG_DOCUMENT_NOT_FOUND, code=errors.NOT_FOUND, status=404)
        inline = document.content_type == INLINE
        name = document.title + document.file.name[document.file.name.rfind("."):]
        with document.file.open("rb") as stored:  # whole, as an attachment is (a streamed file under
            body = stored.read()                 # ASGI would be read on a thread per chunk)
        response = HttpResponse(body, content_type=document.content_type if inline else "application/octet-stream")
        response["Content-Disposition"] = content_disposition_header(not inline, name)
        response["X-Content-Type-Options"] = "nosniff"
        response["Content-Security-Policy"] = "sandbox"  # whatever the browser makes of it, no script of ours
        return response
