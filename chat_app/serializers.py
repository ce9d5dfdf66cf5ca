"""Shapes of the REST answers and request bodies (the stream's frames are in docs/api.md)."""
from django.core.validators import RegexValidator
from rest_framework import serializers

from agents_app.models import Agent
from chat_app.models import Conversation, Message


class AgentSerializer(serializers.ModelSerializer):
    class Meta:
        model = Agent
        fields = ["slug", "name", "is_default"]


class ConversationSerializer(serializers.ModelSerializer):
    agent = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)
    active_run_id = serializers.UUIDField(
        read_only=True, allow_null=True, help_text="进行中的运行（null：没有）；GET /api/v1/runs/<id>/events 可重新接上。"
    )

    class Meta:
        model = Conversation
        fields = ["id", "title", "agent", "hint_domain", "created_at", "updated_at", "active_run_id"]


class MessageSerializer(serializers.ModelSerializer):
    class Meta:
        model = Message
        fields = ["id", "role", "content", "meta", "chart", "agent_name", "request_id", "created_at", "seq"]


class TokenRequestSerializer(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=256, trim_whitespace=False, style={"input_type": "password"})


MSG_CAMPUS_TOKEN_CHARS = "只能包含可见的 ASCII 字符（校园令牌放在 Authorization 请求头中发送）。"


class SsoRequestSerializer(serializers.Serializer):
    # The token travels as `Authorization: Bearer <token>` (to the campus SSO, then to sub-agents):
    # a header carries visible ASCII only, and a CR/LF in it would be a header injection.
    campus_token = serializers.CharField(
        max_length=4096,
        validators=[RegexValidator(r"^[\x21-\x7e]+\Z", message=MSG_CAMPUS_TOKEN_CHARS)],
        help_text="校园统一认证签发的令牌（只发给子 Agent，不进入 JWT）。",
    )


class TokenResponseSerializer(serializers.Serializer):
    access_token = serializers.CharField()
    token_type = serializers.CharField(default="Bearer")
    expires_in = serializers.IntegerField(help_text="秒")
    expires_at = serializers.DateTimeField()


class ErrorSerializer(serializers.Serializer):
    code = serializers.IntegerField()
    message = serializers.CharField()
