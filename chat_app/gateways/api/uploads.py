"""`/api/v1/uploads`: a student's attachments (docs/design.md#attachments). `POST` takes one file
(multipart/form-data, field `file`) and answers `{"id", "name", "content_type", "size"}` (201);
`GET /api/v1/uploads/<id>` gives it back to its owner only (404 for anyone else), with the type
read from its content, `nosniff`, and as a download unless it is an image. The same callers as
`POST /api/v1/chat` (a Bearer JWT or API key, or the page's session + CSRF)."""
from django.http import HttpResponse
from django.utils.http import content_disposition_header
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.parsers import MultiPartParser
from rest_framework.response import Response

from campus_agent.base import errors
from chat_app.conversations.uploads import (
    MSG_NO_FILE,
    upload_get,
    upload_payload,
    upload_store,
)
from chat_app.gateways.api.base import ApiView
from chat_app.gateways.api.serializers import ErrorSerializer

MSG_UPLOAD_NOT_FOUND = _("附件不存在。")


UploadSerializer = inline_serializer("Upload", {
    "id": serializers.UUIDField(), "name": serializers.CharField(), "content_type": serializers.CharField(),
    "size": serializers.IntegerField(),
})


@extend_schema(tags=["chat"])
class UploadView(ApiView):
    parser_classes = [MultiPartParser]

    @extend_schema(
        summary="上传一个附件（图片、PDF、Word、纯文本）",
        request={"multipart/form-data": inline_serializer("UploadForm", {"file": serializers.FileField()})},
        responses={201: UploadSerializer, 400: ErrorSerializer, 401: ErrorSerializer, 413: ErrorSerializer,
                   415: ErrorSerializer, 429: ErrorSerializer, 503: ErrorSerializer},
    )
    def post(self, request):
        files = request.FILES.getlist("file")
        if len(files) != 1:
            raise errors.invalid_body(MSG_NO_FILE)
        upload = upload_store(user=request.user, uploaded=files[0])
        return Response(upload_payload(upload), status=status.HTTP_201_CREATED)


@extend_schema(tags=["chat"])
class UploadFileView(ApiView):
    @extend_schema(summary="取回自己的一个附件", responses={
        200: OpenApiResponse(description="文件本身（图片直接显示，其余为下载）"), 401: ErrorSerializer,
        404: ErrorSerializer})
    def get(self, request, upload_id):
        upload = upload_get(user=request.user, upload_id=upload_id)
        if upload is None:
            raise errors.ApiError(MSG_UPLOAD_NOT_FOUND, code=errors.NOT_FOUND, status=404)
        with upload.file.open("rb") as stored:  # at most UPLOAD_MAX_BYTES: read whole, not streamed
            response = HttpResponse(stored.read(), content_type=upload.content_type)
        response["Content-Disposition"] = content_disposition_header(not upload.is_image, upload.name)
        response["X-Content-Type-Options"] = "nosniff"
        response["Content-Security-Policy"] = "default-src 'none'; sandbox"
        response["Cache-Control"] = "private, max-age=3600"
        return response
