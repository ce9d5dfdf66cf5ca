"""`/api/v1/me/…`: the caller's own data (PIPL; DESIGN §7) — all of it as a JSON download, and
all their conversations deleted. Both take a login (page session or JWT), not an API key: a
leaked key must not be able to carry a student's history away nor wipe it."""
import json

from django.http import HttpResponse
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.response import Response

from chat_app.serializers import ErrorSerializer
from chat_app.services.privacy import user_conversations_delete, user_data_export
from chat_app.views.base import LoginOnlyView


@extend_schema(tags=["me"])
class MyDataExportView(LoginOnlyView):
    @extend_schema(summary="下载我的全部数据（JSON）",
                   responses={200: OpenApiResponse(description="JSON 文件（附件）"), 401: ErrorSerializer})
    def get(self, request):
        body = json.dumps(user_data_export(user=request.user), ensure_ascii=False, indent=1)
        response = HttpResponse(body, content_type="application/json; charset=utf-8")
        name = f"campus-agent-{timezone.localdate():%Y%m%d}.json"
        response["Content-Disposition"] = f'attachment; filename="{name}"'
        response["Cache-Control"] = "no-store"
        return response


@extend_schema(tags=["me"])
class MyConversationsView(LoginOnlyView):
    @extend_schema(summary="删除我的全部对话（无法恢复）", request=None,
                   responses={200: OpenApiResponse(description='{"deleted": <个数>}'), 401: ErrorSerializer})
    def delete(self, request):
        return Response({"deleted": user_conversations_delete(user=request.user)})
