from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from campus_agent.approval import POLICY_HELP, ApprovalPolicy
from campus_agent.models import TimeStampedModel
from subagents_app.models import SubAgent


class McpService(TimeStampedModel):
    """An MCP server whose tools the agents that use it may call."""

    class Protocol(models.TextChoices):
        STDIO = "stdio", "stdio（本机子进程）"
        SSE = "sse", "SSE"
        STREAMABLE_HTTP = "streamable-http", "Streamable HTTP"

    name = models.CharField(
        "名称",
        max_length=64,
        unique=True,
        help_text="服务名，也是工具名前缀：模型看到的工具名是 <名称>__<工具名>。",
    )
    display_name = models.CharField(
        "显示名称",
        max_length=40,
        blank=True,
        help_text="学生在对话页面的工具标签和欢迎语里看到的名字，如“校历”；留空则显示服务名。",
    )
    protocol = models.CharField(
        "协议",
        max_length=20,
        choices=Protocol.choices,
        default=Protocol.STDIO,
        help_text="只有超级管理员可以修改：stdio 服务是在本服务器上运行的程序。",
    )
    config = models.JSONField(
        "连接配置",
        default=dict,
        blank=True,
        help_text=(
            'stdio：{"command": "/srv/campus-agent/.venv/bin/python", "args": ["-m", "my_server"], "env": {"KEY": "v"},'
            ' "cwd": "/srv"}，command 写装有 mcp 的 Python 的完整路径（只写 python 时常常运行的是没有 mcp 的系统 Python），'
            "不经过 shell，只传入 env 中列出的变量；不填 cwd 时在一个空的专用目录中启动。"
            'sse / streamable-http：{"url": "https://mcp.example.edu.cn/mcp", "headers": {"X-Api-Key": "…"}}。'
            "只有超级管理员可以修改：command 是服务器要运行的程序，url 和 headers 决定服务器连到哪里、带上什么凭据。"
        ),
    )
    trusted = models.BooleanField(
        "可信服务",
        default=False,
        help_text="只有超级管理员可以修改。勾选后，该服务工具返回的图片会直接显示给学生；"
        "不可信服务的图片只告诉模型有一张图，不显示。只勾选学校自己运行、内容可靠的服务。",
    )
    enabled = models.BooleanField("启用", default=True)
    timeout_sec = models.PositiveSmallIntegerField(
        "超时（秒）",
        default=30,
        validators=[MinValueValidator(1), MaxValueValidator(300)],
        help_text="连接和每次工具调用的最长时间，1–300 秒。",
    )
    approval_default = models.CharField(
        "工具审批（默认）",
        max_length=8,
        choices=ApprovalPolicy.choices,
        default=ApprovalPolicy.AUTO,
        help_text=POLICY_HELP
        + "可信服务的工具若声明了注解，则按注解：destructiveHint（会删改数据）→ 先经学生确认，readOnlyHint（只读）→ 直接运行；"
        "不可信服务的注解不采用。下面“逐个工具的审批”优先于这两者。",
    )
    tool_approvals = models.JSONField(
        "逐个工具的审批",
        default=dict,
        blank=True,
        help_text='按 MCP 工具名（不带服务名前缀）设置，优先于默认，如 {"register_course": "ask", "drop_all": "never"}；'
        "取值 auto / ask / never。",
    )

    class Meta:
        verbose_name = "MCP 服务"
        verbose_name_plural = "MCP 服务"
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(timeout_sec__gte=1, timeout_sec__lte=300), name="mcpservice_timeout_range"
            ),
            models.CheckConstraint(
                condition=Q(protocol__in=["stdio", "sse", "streamable-http"]), name="mcpservice_protocol_valid"
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def label(self) -> str:
        return self.display_name.strip() or self.name

    def clean(self) -> None:
        from agents_app.validation import mcp_config_errors, tool_approvals_errors

        problems = {}
        if errors := mcp_config_errors(protocol=self.protocol, config=self.config):
            problems["config"] = errors
        if errors := tool_approvals_errors(self.tool_approvals):
            problems["tool_approvals"] = errors
        if problems:
            raise ValidationError(problems)

    def tool_approval(self, *, tool: str, read_only: bool | None = None, destructive: bool | None = None) -> str:
        """The approval policy of one of its tools (DESIGN §4a): the per-tool setting, else — for a
        trusted service only — the tool's own annotations (readOnlyHint → auto, destructiveHint →
        ask), else the service's default. An untrusted server could call a destructive tool
        read-only, so its annotations decide nothing."""
        configured = self.tool_approvals.get(tool) if isinstance(self.tool_approvals, dict) else None
        if configured in ApprovalPolicy.values:
            return configured
        if self.trusted:
            if read_only:
                return ApprovalPolicy.AUTO
            if destructive:
                return ApprovalPolicy.ASK
        return self.approval_default


class Agent(TimeStampedModel):
    """A main agent: the prompt, model and tools one chat turn runs with."""

    slug = models.SlugField(
        "标识", max_length=64, unique=True, help_text="API 中用它选择智能体（请求体的 agent 字段）。"
    )
    name = models.CharField("名称", max_length=100, help_text="学生在页面的智能体选择框里看到的名字。")
    system_prompt = models.TextField(
        "系统提示词", blank=True, help_text="每轮对话最先发给模型的说明：身份、语气、何时使用哪些工具。"
    )
    model = models.CharField(
        "模型", max_length=100, blank=True, help_text="留空则用环境变量 LLM_MODEL 的默认模型（如 qwen-plus）。"
    )
    temperature = models.FloatField(
        "温度",
        default=0.7,
        validators=[MinValueValidator(0.0), MaxValueValidator(2.0)],
        help_text="0–2，越低回答越稳定，越高越发散。",
    )
    enabled = models.BooleanField("启用", default=True, help_text="停用后不再出现在页面和 API 中。")
    is_default = models.BooleanField(
        "默认智能体", default=False, help_text="请求未指定智能体时使用它；只能有一个默认智能体。"
    )
    max_tool_rounds = models.PositiveSmallIntegerField(
        "最多工具轮数",
        default=5,
        validators=[MinValueValidator(1), MaxValueValidator(20)],
        help_text="一轮对话中模型最多连续调用工具几轮（1–20）；到达后模型必须直接回答。",
    )
    mcp_services = models.ManyToManyField(
        McpService, blank=True, related_name="agents", verbose_name="MCP 服务", help_text="该智能体可用的 MCP 服务。"
    )
    sub_agents = models.ManyToManyField(
        SubAgent, blank=True, related_name="agents", verbose_name="子 Agent", help_text="该智能体可调用的子 Agent。"
    )

    class Meta:
        verbose_name = "智能体"
        verbose_name_plural = "智能体"
        ordering = ["-is_default", "name"]
        constraints = [
            models.UniqueConstraint(fields=["is_default"], condition=Q(is_default=True), name="agent_single_default"),
            models.CheckConstraint(
                condition=Q(max_tool_rounds__gte=1, max_tool_rounds__lte=20), name="agent_tool_rounds_range"
            ),
            models.CheckConstraint(condition=Q(temperature__gte=0, temperature__lte=2), name="agent_temperature_range"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.slug})"

    @property
    def effective_model(self) -> str:
        return self.model or settings.LLM_MODEL

    def clean(self) -> None:
        if self.is_default:
            others = Agent.objects.filter(is_default=True).exclude(pk=self.pk)
            if others.exists():
                raise ValidationError({"is_default": f"已有默认智能体“{others.first().name}”，请先取消它的默认。"})
        if self.is_default and not self.enabled:
            raise ValidationError({"enabled": "默认智能体必须启用。"})
