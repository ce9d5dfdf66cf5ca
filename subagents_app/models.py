import re

from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator, URLValidator
from django.db import models
from simple_history.models import HistoricalRecords

from campus_agent.base.approval import POLICY_HELP, ApprovalPolicy
from campus_agent.base.models import TimeStampedModel
from campus_agent.base.text import label_clean, text_head

NAME_PATTERN = r"^[a-z][a-z0-9-]{1,62}$"
TIMEOUT_MIN, TIMEOUT_MAX = 1, 300
# Who sees what (docs/design.md#campus-identity-and-audit): agents, MCP services and sub-agents alike.
ALLOWED_GROUPS_HELP = (
    "留空：所有用户都能用。选了用户组：只有这些组的成员能看到和使用它——页面、API、/v1/models、"
    "MCP、A2A 都不向其他人列出，模型在其他人的对话里也拿不到它的工具；其他人直接点名请求它时，"
    "得到的回答与它不存在时相同。超级用户不受限制。"
)


class ServiceUrlValidator(URLValidator):
    """An http(s) URL whose host may be a single label, as in `http://canteen-agent:8000`.

    Sub-agents usually run beside the gateway under a container or service name, which
    Django's URLValidator rejects for lacking a top-level domain.
    """

    host_re = (
        "(" + URLValidator.hostname_re + URLValidator.domain_re + "(?:" + URLValidator.tld_re + ")?|localhost)"
    )
    regex = re.compile(
        r"^(?:[a-z0-9.+-]*)://"
        r"(?:[^\s:@/]+(?::[^\s:@/]*)?@)?"
        r"(?:" + URLValidator.ipv4_re + "|" + URLValidator.ipv6_re + "|" + host_re + ")"
        r"(?::[0-9]{1,5})?"
        r"(?:[/?#][^\s]*)?"
        r"\Z",
        re.IGNORECASE,
    )
    schemes = ["http", "https"]
    message = "服务地址须是 http:// 或 https:// 开头的完整地址，如 http://canteen-agent:8000 。"


class SubAgent(TimeStampedModel):
    """An independently deployed sub-agent, offered to the model as the tool `call_<name>`."""

    class Protocol(models.TextChoices):
        # The seed contract (docs/design.md#sub-agents): POST {base_url}/api/v1/chat, answered with SSE frames.
        CAMPUS_SSE = "campus-sse", "校园子 Agent 协议（POST /api/v1/chat + SSE）"
        # The Agent2Agent protocol: Agent Card at {base_url}/.well-known/agent-card.json.
        A2A = "a2a", "A2A（Agent2Agent，按 Agent Card 调用）"

    name = models.CharField(
        "名称",
        max_length=63,
        unique=True,
        validators=[RegexValidator(NAME_PATTERN, "名称须以小写字母开头，只含小写字母、数字和连字符，2–63 个字符。")],
        help_text="小写字母开头，只含小写字母、数字和 “-”，如 canteen、course-select。模型看到的工具名是 call_<名称>（“-” 换成 “_”）。",
    )
    display_name = models.CharField(
        "显示名称",
        max_length=40,
        blank=True,
        help_text="学生在对话页面看到的名字（工具标签、欢迎语），如“食堂助手”；留空则用描述开头的短语，再没有就用名称。",
    )
    description = models.TextField(
        "描述",
        help_text="模型读这段描述来决定何时调用该子 Agent：请写清它能做什么，并包含触发关键词（如“食堂、菜单、吃什么”）。",
    )
    protocol = models.CharField(
        "协议",
        max_length=16,
        choices=Protocol.choices,
        default=Protocol.CAMPUS_SSE,
        help_text=(
            "子 Agent 说哪种协议。A2A：服务地址填 Agent 的根地址，网关读取 {服务地址}/.well-known/agent-card.json "
            "上的 Agent Card，按卡片声明的 JSON-RPC 地址调用；描述留空时从卡片的技能生成。只有超级管理员可以修改。"
        ),
    )
    # A CharField with its own validator: URLField would refuse single-label service hosts.
    base_url = models.CharField(
        "服务地址",
        max_length=500,
        validators=[ServiceUrlValidator()],
        help_text=(
            "子 Agent 的根地址，如 http://canteen-agent:8000 。网关会 POST {服务地址}/api/v1/chat "
            "（A2A：读取 {服务地址}/.well-known/agent-card.json），并带上学生的校园令牌，所以只有超级管理员可以修改。"
        ),
    )
    domain = models.CharField(
        "业务域",
        max_length=64,
        blank=True,
        help_text="随每次调用发给子 Agent 的 domain 字段，如 canteen、course。",
    )
    timeout_sec = models.PositiveSmallIntegerField(
        "超时（秒）",
        default=30,
        validators=[MinValueValidator(TIMEOUT_MIN), MaxValueValidator(TIMEOUT_MAX)],
        help_text="整次调用（含流式输出）的最长时间，1–300 秒；超时后模型得到“子 Agent 响应超时，请稍后重试。”，学生看到“「<服务>」服务响应超时，请稍后再试。”（<服务>是描述的开头，如“食堂助手”）。",
    )
    enabled = models.BooleanField("启用", default=True, help_text="停用后，任何智能体都不会再调用它（下一轮对话即生效）。")
    approval_policy = models.CharField(
        "审批",
        max_length=8,
        choices=ApprovalPolicy.choices,
        default=ApprovalPolicy.AUTO,
        help_text=POLICY_HELP,
    )
    example_questions = models.TextField(
        "示例问题",
        blank=True,
        help_text="每行一个问题，如“二食堂中午吃什么？”。新对话的欢迎页把它们显示为按钮，学生点一下就能提问。",
    )
    allowed_groups = models.ManyToManyField(
        Group, blank=True, related_name="+", verbose_name="可用的用户组", help_text=ALLOWED_GROUPS_HELP
    )
    # Old values for the admin's diff and rollback (campus_agent.base.history), the groups included.
    history = HistoricalRecords(m2m_fields=["allowed_groups"])

    class Meta:
        verbose_name = "子 Agent"
        verbose_name_plural = "子 Agent"
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(timeout_sec__gte=TIMEOUT_MIN, timeout_sec__lte=TIMEOUT_MAX),
                name="subagent_timeout_range",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def label(self) -> str:
        """How students see it named: the display name staff set, else the head of the description
        ("食堂助手（演示）") when short, else the name."""
        return self.display_name.strip() or text_head(self.description) or self.name

    @property
    def example_question_list(self) -> list[str]:
        return [line.strip() for line in (self.example_questions or "").splitlines() if line.strip()]

    @property
    def is_a2a(self) -> bool:
        return self.protocol == self.Protocol.A2A

    def clean(self) -> None:
        # Students read these (docs/security.md#text-that-cannot-mislead); each example question is a line.
        self.display_name = label_clean(self.display_name)
        self.example_questions = label_clean(self.example_questions, multiline=True)
        errors = {}
        if self.description is not None and not self.description.strip():
            errors["description"] = "描述不能为空：模型靠它决定何时调用。"
        if errors:
            raise ValidationError(errors)
