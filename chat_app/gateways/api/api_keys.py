"""`/api/v1/api-keys`: the caller's personal API keys (docs/design.md#other-clients) — make one (its secret is in
this answer only), list them (never a secret), revoke one.

Managing keys takes a login (the page's session or a JWT), never a key: a leaked key cannot make
more keys nor hide itself by revoking the others."""
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response

from campus_agent.base import errors
from chat_app.accounts.api_keys import (
    api_key_create,
    api_key_expiry_clean,
    api_key_name_clean,
    api_key_revoke,
    api_keys_of,
)
from chat_app.gateways.api.base import LoginOnlyView
from chat_app.gateways.api.serializers import ErrorSerializer
from chat_app.models import ApiKey

MSG_KEY_NOT_FOUND = _("API 密钥不存在。")


class ApiKeySerializer(serializers.ModelSerializer):
    class Meta:
        model = ApiKey
        fields = ["id", "name", "prefix", "created_at", "last_used_at", "expires_at"]


class ApiKeyCreatedSerializer(ApiKeySerializer):
    key = serializers.CharField(help_text="密钥本身，只在这次返回：请立即复制保存。")

    class Meta(ApiKeySerializer.Meta):
        fields = [*ApiKeySerializer.Meta.fields, "key"]


class ApiKeyCreateSerializer(serializers.Serializer):
    name = serializers.CharField(help_text="1–64 个字符，如“Cherry Studio”。")
    expires_at = serializers.DateTimeField(required=False, allow_null=True, help_text="可选，一年之内；留空不过期。")


@extend_schema(tags=["api-keys"])
class ApiKeyListView(LoginOnlyView):
    @extend_schema(summary="我的 API 密钥（不含密钥本身）", responses={200: ApiKeySerializer(many=True), 401: ErrorSerializer})
    def get(self, request):
        keys = api_keys_of(request.user).filter(revoked_at__isnull=True)
        return Response(ApiKeySerializer(keys, many=True).data)

    @extend_schema(
        summary="新建 API 密钥（密钥只在这次返回）",
        request=ApiKeyCreateSerializer,
        responses={201: ApiKeyCreatedSerializer, 400: ErrorSerializer, 401: ErrorSerializer, 403: ErrorSerializer},
    )
    def post(self, request):
        body = request.data if isinstance(request.data, dict) else {}
        name = api_key_name_clean(body.get("name"))
        expires_at = api_key_expiry_clean(body.get("expires_at"))
        key, secret = api_key_create(user=request.user, name=name, expires_at=expires_at, request=request)
        data = ApiKeySerializer(key).data
        return Response({**data, "key": secret}, status=status.HTTP_201_CREATED)


@extend_schema(tags=["api-keys"])
class ApiKeyDetailView(LoginOnlyView):
    @extend_schema(summary="吊销 API 密钥（所有 worker 立即生效）", responses={204: None, 404: ErrorSerializer})
    def delete(self, request, key_id):
        if api_key_revoke(user=request.user, key_id=key_id, request=request) is None:
            raise errors.ApiError(MSG_KEY_NOT_FOUND, code=errors.NOT_FOUND, status=404)
        return Response(status=status.HTTP_204_NO_CONTENT)
