"""The moderation word lists and the moderation model (docs/design.md#content-safety-and-labels,
docs/safety.md), and the students' reports of answers (举报, docs/safety.md#reports-举报)."""

from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from campus_agent.base.crypto import secret_decrypt, secret_encrypt
from campus_agent.base.models import TimeStampedModel
from safety_app.matcher import word_key

MSG_WORD_SEPARATORS_ONLY = "去掉空格和标点后这个词什么也不剩，无法匹配。"

# Where a list applies: the student's question, the model's answer, its reasoning.
STAGES = ("question", "answer", "reasoning")


class WordList(models.Model):
    class Action(models.TextChoices):
        BLOCK = "block", "拦截"
        MASK = "mask", "打码"

    name = models.CharField("名称", max_length=100, unique=True)
    category = models.CharField("类别", max_length=50, help_text="命中时记录并告诉客户端的类别，如“涉政”“色情”“广告”。")
    action = models.CharField(
        "处理方式",
        max_length=10,
        choices=Action.choices,
        default=Action.BLOCK,
        help_text="拦截：问题不发给模型，回答以固定提示结束；打码：把词换成 *。",
    )
    question = models.BooleanField("检查提问", default=True, help_text="学生发出的问题。")
    answer = models.BooleanField(
        "检查回答", default=True, help_text="模型给出的回答、它调用工具时写的参数，以及工具返回给学生看的文字；边生成边检查。"
    )
    reasoning = models.BooleanField("检查思考过程", default=True, help_text="模型展示的思考过程；边生成边检查。")
    enabled = models.BooleanField("启用", default=True)
    updated_at = models.DateTimeField("更新时间", auto_now=True)

    class Meta:
        verbose_name = verbose_name_plural = "敏感词表"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def stages(self) -> tuple[str, ...]:
        return tuple(stage for stage in STAGES if getattr(self, stage))


class ListWord(models.Model):
    word_list = models.ForeignKey(WordList, on_delete=models.CASCADE, related_name="words", verbose_name="词表")
    word = models.CharField(
        "词",
        max_length=100,
        help_text="匹配时忽略全角/半角、大小写，以及字之间插入的空格和标点。",
    )

    class Meta:
        verbose_name = verbose_name_plural = "敏感词"
        constraints = [models.UniqueConstraint(fields=["word_list", "word"], name="list_word_unique")]

    def __str__(self) -> str:
        return self.word

    def clean(self) -> None:
        if not word_key(self.word):
            raise ValidationError({"word": MSG_WORD_SEPARATORS_ONLY})


class WordListStamp(models.Model):
    """One row whose `token` a database trigger replaces at every write to the word lists
    (safety_app.lists_cache): a worker rebuilds its automaton only when the token has changed."""

    token = models.CharField("版本标记", max_length=32)

    class Meta:
        verbose_name = verbose_name_plural = "词表版本标记"

    def __str__(self) -> str:
        return self.token


# What a report keeps of the reported turn, and of the student's own words.
REPORT_SNAPSHOT_MAX = 20_000
REPORT_DETAIL_MAX = 500


class AnswerReport(models.Model):
    """A student's complaint about one AI answer (the complaint channel of 《生成式人工智能服务管理暂行办法》
    art. 15). The answer and its question are copied when the report is filed: the report stays
    readable when the conversation is deleted, so `message_id` and `conversation_id` are plain ids,
    not keys. One report per student and answer (safety_app.reports.report_file)."""

    # The labels are shown to the student too (the page's dialog and the report's status): translated.
    class Reason(models.TextChoices):
        ILLEGAL = "illegal", _("违法违规")
        SEXUAL = "sexual", _("色情低俗")
        FALSE = "false", _("虚假或错误信息")
        DISCRIMINATION = "discrimination", _("歧视偏见")
        HARMFUL = "harmful", _("危险或有害内容")
        PRIVACY = "privacy", _("侵犯隐私或他人权益")
        OTHER = "other", _("其他")

    class Status(models.TextChoices):
        PENDING = "pending", _("待处理")
        HANDLING = "handling", _("处理中")
        RESOLVED = "resolved", _("已处理")
        REJECTED = "rejected", _("已驳回")

    reporter = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        related_name="answer_reports",
        verbose_name="举报人",
    )
    message_id = models.UUIDField("回答消息 ID", db_index=True, help_text="被举报的回答（AI 消息）的 ID。")
    conversation_id = models.UUIDField("对话 ID", help_text="回答所在的对话；对话删除后举报仍保留。")
    agent_name = models.CharField("智能体", max_length=100, blank=True, default="", help_text="给出回答的智能体。")
    question = models.TextField("提问（快照）", blank=True, default="", help_text="举报时这个回答之前的学生提问，原样保存。")
    answer = models.TextField("回答（快照）", blank=True, default="", help_text="举报时这个回答的全文，原样保存。")
    reason = models.CharField("举报原因", max_length=20, choices=Reason.choices)
    detail = models.TextField("补充说明", blank=True, default="", max_length=REPORT_DETAIL_MAX, help_text="学生写的说明（可选）。")
    status = models.CharField(
        "处理状态",
        max_length=10,
        choices=Status.choices,
        default=Status.PENDING,
        db_index=True,
        help_text="学生在页面上看得到这个状态。改变状态时自动记下处理人和处理时间。",
    )
    outcome = models.TextField(
        "处理结果", blank=True, default="", help_text="处理了什么、为什么（如“已把该词加入敏感词表”“回答无误，驳回”）。"
    )
    handled_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name="处理人",
    )
    created_at = models.DateTimeField("举报时间", auto_now_add=True, db_index=True)
    handled_at = models.DateTimeField("处理时间", null=True, blank=True)

    class Meta:
        verbose_name = verbose_name_plural = "举报"
        ordering = ["-created_at"]
        constraints = [models.UniqueConstraint(fields=["reporter", "message_id"], name="answer_report_one_per_user")]

    def __str__(self) -> str:
        return f"{self.get_reason_display()} · {self.message_id}"


MODERATION_URL_ERROR = "请填写 http:// 或 https:// 开头的地址，如 http://10.0.0.5:8001/v1。"
PROMPT_PLACEHOLDER = "{text}"
PROMPT_PLACEHOLDER_ERROR = "提示词里要有 {text}：被检查的文字放在那里。"
ONE_ENABLED_ERROR = "同时只能启用一个审核模型，请先停用正在用的那个。"
TIMEOUT_MAX_SEC = 30


def moderation_url_validate(value: str) -> None:
    """An http(s) URL with a host and nothing a URL cannot hold (spaces, control characters)."""
    parts = urlsplit(value or "")
    if (parts.scheme.lower() not in ("http", "https") or not parts.hostname
            or any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in value)):
        raise ValidationError(MODERATION_URL_ERROR)


class ModerationModel(TimeStampedModel):
    """A moderation model asked about a text besides the word lists (safety_app.model_check):
    an OpenAI-compatible `/v1/moderations` endpoint, or a guard chat model (Qwen3Guard-Gen …)
    behind `/v1/chat/completions`. At most one is enabled. The API key is kept encrypted
    (campus_agent.base.crypto), as a model provider's is."""

    class Kind(models.TextChoices):
        MODERATIONS = "moderations", "审核接口（/v1/moderations）"
        GUARD_CHAT = "guard_chat", "安全对话模型（/v1/chat/completions，如 Qwen3Guard）"

    class FailMode(models.TextChoices):
        OPEN = "open", "放行"
        CLOSED = "closed", "拦截"

    name = models.CharField("名称", max_length=64, unique=True)
    kind = models.CharField(
        "类型", max_length=16, choices=Kind.choices, default=Kind.MODERATIONS,
        help_text="审核接口：POST {地址}/moderations，按返回的 flagged 判断；安全对话模型：POST {地址}/chat/completions，"
        "按回答里的“Safety: Safe / Unsafe / Controversial”判断。",
    )
    base_url = models.CharField(
        "接口地址", max_length=500, validators=[moderation_url_validate],
        help_text="OpenAI 兼容接口的地址，如 http://10.0.0.5:8001/v1；末尾没有 /v1 时自动补上。被检查的文字发往这里。",
    )
    model = models.CharField("模型", max_length=100, help_text="请求里的 model，如 omni-moderation-latest、Qwen/Qwen3Guard-Gen-4B。")
    api_key_encrypted = models.TextField("API 密钥（加密）", blank=True, default="", editable=False)
    prompt = models.TextField(
        "提示词", default=PROMPT_PLACEHOLDER,
        help_text="只用于安全对话模型：作为用户消息发送，{text} 换成被检查的文字。Qwen3Guard-Gen、Llama Guard 的审核说明"
        "在它们自己的对话模板里，保持默认的 {text} 即可；用普通对话模型审核时，写清审核要求，并要求它按"
        "“Safety: Safe|Unsafe|Controversial”和“Categories: 类别”两行回答。",
    )
    question = models.BooleanField("检查提问", default=True, help_text="学生发出的问题：模型判定违规时，问题不发给对话模型，以固定提示回答。")
    answer = models.BooleanField(
        "检查回答", default=False, help_text="模型给出的回答，逐句分段检查：每段经审核模型通过后才显示，学生会多等每段一次调用的时间。"
    )
    reasoning = models.BooleanField(
        "检查思考过程", default=False, help_text="模型展示的思考过程，同样逐段检查后才显示。"
    )
    timeout_sec = models.PositiveSmallIntegerField(
        "超时（秒）", default=5, validators=[MinValueValidator(1), MaxValueValidator(TIMEOUT_MAX_SEC)],
        help_text=f"一次审核最长等待的秒数（1–{TIMEOUT_MAX_SEC}），从发出请求到读完回答；超时按“失败时”处理。"
        "每个问题都先等审核结果，再调用对话模型。",
    )
    fail_mode = models.CharField(
        "失败时", max_length=8, choices=FailMode.choices, default=FailMode.OPEN,
        help_text="审核模型超时、出错或回答无法解析时：放行（只按敏感词表检查）或拦截（当作违规）。",
    )
    controversial_flagged = models.BooleanField(
        "争议内容视为违规", default=False,
        help_text="只用于安全对话模型：回答“Safety: Controversial”时是否拦截（不勾选则放行）。",
    )
    enabled = models.BooleanField("启用", default=True)

    class Meta:
        verbose_name = verbose_name_plural = "审核模型"
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(
                fields=["enabled"], condition=Q(enabled=True), name="moderation_model_one_enabled",
                violation_error_message=ONE_ENABLED_ERROR,
            ),
            models.CheckConstraint(
                condition=Q(timeout_sec__gte=1, timeout_sec__lte=TIMEOUT_MAX_SEC), name="moderation_model_timeout_range"
            ),
            models.CheckConstraint(condition=Q(kind__in=["moderations", "guard_chat"]), name="moderation_model_kind_valid"),
            models.CheckConstraint(condition=Q(fail_mode__in=["open", "closed"]), name="moderation_model_fail_mode_valid"),
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        if self.kind == self.Kind.GUARD_CHAT and PROMPT_PLACEHOLDER not in (self.prompt or ""):
            raise ValidationError({"prompt": PROMPT_PLACEHOLDER_ERROR})

    def stages(self) -> tuple[str, ...]:
        return tuple(stage for stage in STAGES if getattr(self, stage))

    @property
    def api_key_set(self) -> bool:
        return bool(self.api_key_encrypted)

    def api_key_store(self, key: str | None) -> None:
        """Keeps `key` encrypted (None or "" removes it); saved with the row."""
        self.api_key_encrypted = secret_encrypt(key) if key else ""

    def api_key_plain(self) -> str:
        """The key to send ("" when there is none or it cannot be decrypted)."""
        return secret_decrypt(self.api_key_encrypted) or ""

    @property
    def api_key_unreadable(self) -> bool:
        """A key is stored but cannot be decrypted (PROVIDER_KEY_SECRET or SECRET_KEY changed)."""
        return bool(self.api_key_encrypted) and secret_decrypt(self.api_key_encrypted) is None
