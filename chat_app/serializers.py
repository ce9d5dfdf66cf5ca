"""Shapes of the REST answers and request bodies (the stream's frames are in docs/api.md)."""
from rest_framework import serializers

from agents_app.models import Agent
from chat_app.models import Conversation, Message


class AgentSerializer(serializers.ModelSerializer):
    class Meta:
        model = Agent
        fields = ["slug", "name", "is_default"]


class ConversationSerializer(serializers.ModelSerializer):
    agent = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)

    class Meta:
        model = Conversation
        fields = ["id", "title", "agent", "hint_domain", "created_at", "updated_at"]


class MessageSerializer(serializers.ModelSerializer):
    class Meta:
        model = Message
        fields = ["id", "role", "content", "meta", "chart", "agent_name", "request_id", "created_at", "seq"]


class TokenRequestSerializer(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=256, trim_whitespace=False, style={"input_type": "password"})


class SsoRequestSerializer(serializers.Serializer):
    campus_token = serializers.CharField(max_length=4096, help_text="校园统一认证签发的令牌（只发给子 Agent，不进入 JWT）。")


class TokenResponseSerializer(serializers.Serializer):
    access_token = serializers.CharField()
    token_type = serializers.CharField(default="Bearer")
    expires_in = serializers.IntegerField(help_text="秒")
    expires_at = serializers.DateTimeField()


class ErrorSerializer(serializers.Serializer):
    code = serializers.IntegerField()
    message = serializers.CharField()
