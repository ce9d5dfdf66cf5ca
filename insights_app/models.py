from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.utils import timezone

from agents_app.models import Agent
from campus_agent.base.models import TimeStampedModel
from chat_app.models import Message

ANY_TOOL = "*"


class RoutingCase(TimeStampedModel):
    """A question an agent must route to the right tool: replayed by `routing_check` and the
    admin, which judge only the model's first tool choice (no tool is run)."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="routing_cases", verbose_name="智能体")
    question = models.TextField("问题", help_text="学生的问题，原样发给模型。")
    history = models.JSONField(
        "之前的对话",
        default=list,
        blank=True,
        help_text="可选：问题之前的几轮对话（追问时需要），按顺序发在问题前面。",
    )
    must_call = models.JSONField("必须调用的工具", default=list, blank=True)
    must_not_call = models.JSONField("不得调用的工具", default=list, blank=True)
    notes = models.TextField("备注", blank=True, help_text="为什么有这个用例：来自哪次误判、期望的行为。")
    enabled = models.BooleanField("启用", default=True, help_text="停用的用例不参加检查。")
    source_message = models.ForeignKey(
        Message,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name="来源消息",
        help_text="从对话记录保存时的那条用户消息。",
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+",
        verbose_name="创建人",
    )

    class Meta:
        verbose_name = "路由用例"
        verbose_name_plural = "路由用例"
        ordering = ["agent", "id"]

    def __str__(self) -> str:
        flat = " ".join(self.question.split())
        return flat if len(flat) <= 40 else flat[:40] + "…"

    def clean(self) -> None:
        must, must_not = set(self.must_call or []), set(self.must_not_call or [])
        if not must and not must_not:
            raise ValidationError("请至少填写一个必须调用或不得调用的工具，否则这个用例什么也不检查。")
        if both := sorted(must & must_not):
            raise ValidationError({"must_not_call": f"这些工具同时出现在“必须调用”里：{'、'.join(both)}"})
        if ANY_TOOL in must_not and must:
            raise ValidationError({"must_not_call": "“*”表示不得调用任何工具，不能再要求必须调用某个工具。"})


class RoutingArgExpectation(models.Model):
    """What one argument of a call must contain, e.g. `message` of call_canteen mentions 二食堂."""

    case = models.ForeignKey(RoutingCase, on_delete=models.CASCADE, related_name="arg_expectations",
                             verbose_name="用例")
    tool = models.CharField("工具", max_length=64, help_text="如 call_canteen。")
    argument = models.CharField("参数", max_length=64, default="message", help_text="子 Agent 的参数是 message。")
    contains = models.CharField("应包含", max_length=200, help_text="参数值中必须出现的文字（不区分大小写）。")

    class Meta:
        verbose_name = "参数要求"
        verbose_name_plural = "参数要求"
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.tool}.{self.argument} ⊇ {self.contains}"


class RoutingCheck(models.Model):
    """One replay of an agent's cases: against which model and catalog, with what result."""

    class Mode(models.TextChoices):
        MODEL = "model", "模型"
        KEYWORD = "keyword", "关键词路由"

    class Trigger(models.TextChoices):
        COMMAND = "command", "命令行（routing_check）"
        ADMIN = "admin", "后台"

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="routing_checks", verbose_name="智能体")
    mode = models.CharField("路由方式", max_length=16, choices=Mode.choices)
    model = models.CharField("模型", max_length=100, blank=True, help_text="关键词路由时为空。")
    fingerprint = models.CharField(
        "目录指纹", max_length=16, help_text="提示词、模型和工具（名称、描述、参数）的摘要：指纹不同说明目录变了。"
    )
    tools = models.JSONField("提供的工具", default=list, blank=True)
    problems = models.JSONField("连接问题", default=list, blank=True, help_text="没能列出工具的 MCP 服务。")
    repeat = models.PositiveSmallIntegerField("每个用例运行次数")
    pass_rate = models.FloatField("通过率要求")
    trigger = models.CharField("发起方式", max_length=16, choices=Trigger.choices)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+",
        verbose_name="发起人",
    )
    previous = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="+", verbose_name="上一次检查"
    )
    started_at = models.DateTimeField("开始时间", auto_now_add=True, db_index=True)
    duration_ms = models.PositiveIntegerField("耗时（毫秒）", default=0)
    total = models.PositiveIntegerField("用例数", default=0)
    passed = models.PositiveIntegerField("通过", default=0)
    regressed = models.PositiveIntegerField("新失败", default=0, help_text="上一次通过、这一次失败的用例。")
    fixed = models.PositiveIntegerField("新通过", default=0, help_text="上一次失败、这一次通过的用例。")

    class Meta:
        verbose_name = "路由检查"
        verbose_name_plural = "路由检查"
        ordering = ["-started_at", "-id"]

    def __str__(self) -> str:
        return f"{self.agent.slug} · {timezone.localtime(self.started_at):%Y-%m-%d %H:%M} · {self.passed}/{self.total}"


class RoutingOutcome(models.Model):
    """One case in one check: how many of its runs chose right, and the change since last time."""

    class Change(models.TextChoices):
        REGRESSED = "regressed", "新失败"
        FIXED = "fixed", "新通过"
        STILL_FAILING = "failing", "仍失败"
        STILL_PASSING = "passing", "仍通过"
        NEW = "new", "首次检查"

    check_run = models.ForeignKey(RoutingCheck, on_delete=models.CASCADE, related_name="outcomes",
                                  verbose_name="检查")
    case = models.ForeignKey(RoutingCase, on_delete=models.SET_NULL, null=True, blank=True, related_name="outcomes",
                             verbose_name="用例")
    question = models.TextField("问题")  # kept when the case is edited or deleted
    runs = models.PositiveSmallIntegerField("运行次数")
    passes = models.PositiveSmallIntegerField("选对次数")
    passed = models.BooleanField("通过")
    change = models.CharField("与上次相比", max_length=16, choices=Change.choices)
    detail = models.JSONField("每次运行", default=list, blank=True,
                              help_text="每次运行模型选择的工具和参数，以及不符合要求之处。")

    class Meta:
        verbose_name = "用例结果"
        verbose_name_plural = "用例结果"
        ordering = ["check_run", "passed", "id"]
        constraints = [
            models.CheckConstraint(condition=Q(passes__lte=models.F("runs")), name="routingoutcome_passes_le_runs"),
        ]

    def __str__(self) -> str:
        return f"{self.question[:30]} · {self.passes}/{self.runs}"


class UsageDaily(models.Model):
    """Turns and tokens per day, user, agent and model: the rollup the usage reports read.

    Kept from chat_app's `turn_usage_recorded` signal as each turn is stored, so it survives a
    student deleting the conversation (the messages go, the cost stays); `manage.py
    usage_rollup_rebuild` recomputes it from the stored messages."""

    day = models.DateField("日期", db_index=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+",
        verbose_name="用户",
    )
    username = models.CharField("用户名", max_length=150, blank=True)  # kept when the user is deleted
    agent_name = models.CharField("智能体", max_length=100, blank=True)
    model = models.CharField("模型", max_length=100, blank=True)
    provider = models.CharField(
        "模型提供方", max_length=64, blank=True, help_text="回答的模型提供方（后台的名称；default 为环境变量 LLM_* 配置的）；关键词路由为空。"
    )
    turns = models.PositiveIntegerField("轮数", default=0)
    fallback_turns = models.PositiveIntegerField("关键词路由轮数", default=0, help_text="模型不可用时关键词路由回答的轮数（不计 tokens）。")
    prompt_tokens = models.PositiveBigIntegerField("输入 tokens", default=0)
    completion_tokens = models.PositiveBigIntegerField("输出 tokens", default=0)
    cached_tokens = models.PositiveBigIntegerField("缓存命中 tokens", default=0)

    class Meta:
        verbose_name = "每日用量"
        verbose_name_plural = "每日用量"
        ordering = ["-day", "-prompt_tokens"]
        constraints = [
            models.UniqueConstraint(fields=["day", "user", "agent_name", "provider", "model"],
                                    name="usagedaily_one_row_per_key"),
        ]

    def __str__(self) -> str:
        return f"{self.day} · {self.username} · {self.agent_name}"

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens
