"""`/api/v1/me/…`: the caller's own data (PIPL; docs/design.md#cross-cutting-rules) — all of it as a JSON download, and
all their conversations deleted, and the MCP services they connected their own account to,
listed and disconnected. All take a login (page session or JWT), not an API key: a leaked key
must not be able to carry a student's history away, wipe it, or cut their accounts."""
import json

from asgiref.sync import async_to_sync
from django.db import transaction
from django.http import HttpResponse
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.response import Response

from audit_app.chain import Event, audit_record
from campus_agent.base import errors
from chat_app.conversations.privacy import (
    connected_account_remove,
    connected_accounts,
    user_conversations_delete,
    user_data_export,
)
from chat_app.gateways.api.base import LoginOnlyView
from chat_app.gateways.api.serializers import ErrorSerializer
from chat_app.runs.engine import runs_end_before_delete


@extend_schema(tags=["me"])
class MyDataExportView(LoginOnlyView):
    @extend_schema(summary="下载我的全部数据（JSON）",
                   responses={200: OpenApiResponse(
                       description="JSON 文件（附件）；每条 AI 回答带显式标识 label（「内容由 AI 生成」）和隐式标识 aigc"
                                   "（GB 45438-2025：Label、ContentProducer、ProduceID 等，外加 provider、model）"),
                       401: ErrorSerializer})
    def get(self, request):
        data = user_data_export(user=request.user)
        audit_record(event=Event.DATA_EXPORT, request=request, target="me",
                     details={"conversations": len(data.get("conversations", []))})
        body = json.dumps(data, ensure_ascii=False, indent=1)
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
        async_to_sync(runs_end_before_delete)(user_id=request.user.pk)
        with transaction.atomic():
            deleted = user_conversations_delete(user=request.user)
            audit_record(event=Event.DATA_DELETION, request=request, target="conversations",
                         details={"conversations": deleted})
        return Response({"deleted": deleted})


@extend_schema(tags=["me"])
class MyAccountsView(LoginOnlyView):
    @extend_schema(summary="我连接的 MCP 服务账号", responses={
        200: OpenApiResponse(description='[{"id", "service", "scope", "connected_at", "expires_at"}]'),
        401: ErrorSerializer})
    def get(self, request):
        return Response(connected_accounts(user=request.user))


@extend_schema(tags=["me"])
class MyAccountView(LoginOnlyView):
    @extend_schema(summary="断开一个连接的账号（删除保存的令牌）", request=None,
                   responses={204: None, 401: ErrorSerializer, 404: ErrorSerializer})
    def delete(self, request, grant_id: int):
        if not connected_account_remove(user=request.user, grant_id=grant_id):
            raise errors.ApiError(_("没有这个连接的账号。"), code=errors.NOT_FOUND, status=404)
        audit_record(event=Event.DATA_DELETION, request=request, target=f"connected_account:{grant_id}",
                     details={"connected_account": grant_id})
        return Response(status=status.HTTP_204_NO_CONTENT)
