"""Shapes of the REST answers and request bodies (the stream's frames are in docs/api.md)."""
from django.core.validators import RegexValidator
from django.utils.text import format_lazy
from django.utils.translation import gettext_lazy as _
from rest_framework import serializers

from agents_app.models import Agent
from campus_agent.base.text import label_clean
from chat_app.models import FEEDBACK_COMMENT_MAX, Conversation, Feedback, Message
from safety_app.models import REPORT_DETAIL_MAX, AnswerReport

TITLE_MAX = 64
SEARCH_QUERY_MAX = 100
MSG_TITLE_EMPTY = _("标题不能为空。")
MSG_TITLE_TOO_LONG = format_lazy(_("标题不能超过 {limit} 个字符。"), limit=TITLE_MAX)
MSG_COMMENT_TOO_LONG = format_lazy(_("意见不能超过 {limit} 个字符。"), limit=FEEDBACK_COMMENT_MAX)
MSG_RATING = _("rating 只能是 up 或 down。")


class AgentSerializer(serializers.ModelSerializer):
    class Meta:
        model = Agent
        fields = ["slug", "name", "is_default"]


class ConversationSerializer(serializers.ModelSerializer):
    agent = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)
    active_run_id = serializers.UUIDField(
        read_only=True, allow_null=True, help_text="进行中的运行（null：没有）；GET /api/v1/runs/<id>/events 可重新接上。"
    )
    snippet = serializers.SerializerMethodField(
        help_text="搜索（q）时：第一条含搜索词的消息中搜索词前后的一段（空白合并，截断处为 …）；只有标题匹配或不是搜索时为 null。"
    )

    class Meta:
        model = Conversation
        fields = ["id", "title", "agent", "hint_domain", "created_at", "updated_at", "active_run_id", "snippet"]

    def get_snippet(self, conversation) -> str | None:
        snippet = getattr(conversation, "match_snippet", None)  # conversation_search's
        return " ".join(snippet.split()) if snippet else None


class MessageSerializer(serializers.ModelSerializer):
    report_status = serializers.ChoiceField(
        choices=AnswerReport.Status.choices,
        read_only=True,
        allow_null=True,
        help_text="你对这条回答的举报的处理状态（pending / handling / resolved / rejected）；null：没有举报。",
    )

    class Meta:
        model = Message
        fields = [
            "id", "role", "content", "meta", "chart", "agent_name", "request_id", "created_at", "seq", "superseded",
            "report_status",
        ]


class LabelField(serializers.CharField):
    """A short text people read elsewhere (a title, a comment), cleaned before it is checked
    (campus_agent.base.text.label_clean: no control, bidi or separator character; whitespace runs
    made one), so a stray character is dropped rather than stored or answered with an English
    400. `multiline`: line breaks kept."""

    def __init__(self, *, multiline: bool = False, **kwargs):
        super().__init__(trim_whitespace=False, **kwargs)
        self.multiline = multiline

    def to_internal_value(self, data):
        if not isinstance(data, str):  # DRF would take 5 as "5"; a title or comment is text
            self.fail("invalid")
        return label_clean(super().to_internal_value(data), multiline=self.multiline)


class ConversationTitleSerializer(serializers.Serializer):
    title = LabelField(allow_blank=True, help_text="1–64 个字符（去掉不可见的控制字符、合并连续空白后）。")

    def validate_title(self, title: str) -> str:
        if not title:
            raise serializers.ValidationError(MSG_TITLE_EMPTY)
        if len(title) > TITLE_MAX:
            raise serializers.ValidationError(MSG_TITLE_TOO_LONG)
        return title


class FeedbackSerializer(serializers.ModelSerializer):
    rating = serializers.ChoiceField(
        choices=Feedback.Rating.choices, error_messages={"invalid_choice": MSG_RATING}, help_text="up 或 down"
    )
    comment = LabelField(
        multiline=True,
        required=False,
        allow_blank=True,
        default="",
        max_length=FEEDBACK_COMMENT_MAX,
        error_messages={"max_length": MSG_COMMENT_TOO_LONG},
        help_text="可选，最多 1000 个字符。",
    )

    class Meta:
        model = Feedback
        fields = ["message", "rating", "comment", "updated_at"]
        read_only_fields = ["message", "updated_at"]


MSG_REPORT_REASON = format_lazy(
    _("reason 只能是：{reasons}。"), reasons=", ".join(AnswerReport.Reason.values)
)
MSG_REPORT_DETAIL_TOO_LONG = format_lazy(_("说明不能超过 {limit} 个字符。"), limit=REPORT_DETAIL_MAX)


class ReportRequestSerializer(serializers.Serializer):
    reason = serializers.ChoiceField(
        choices=AnswerReport.Reason.choices,
        error_messages={"invalid_choice": MSG_REPORT_REASON},
        help_text="举报原因：" + " / ".join(AnswerReport.Reason.values) + "（含义见 docs/api.md）",
    )
    detail = LabelField(
        multiline=True,
        required=False,
        allow_blank=True,
        default="",
        max_length=REPORT_DETAIL_MAX,
        error_messages={"max_length": MSG_REPORT_DETAIL_TOO_LONG},
        help_text=f"可选的补充说明，最多 {REPORT_DETAIL_MAX} 个字符。",
    )


class ReportSerializer(serializers.ModelSerializer):
    status_label = serializers.CharField(source="get_status_display", read_only=True, help_text="处理状态（你的语言）")

    class Meta:
        model = AnswerReport
        fields = ["id", "message_id", "reason", "status", "status_label", "created_at"]


class SupersedeResponseSerializer(serializers.Serializer):
    question = serializers.CharField(help_text="被替换的问题原文：重新生成时原样再发给 POST /api/v1/chat。")
    message_id = serializers.UUIDField(help_text="被替换的问题消息 ID。")


class TokenRequestSerializer(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=256, trim_whitespace=False, style={"input_type": "password"})


MSG_CAMPUS_TOKEN_CHARS = _("只能包含可见的 ASCII 字符（校园令牌放在 Authorization 请求头中发送）。")


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
