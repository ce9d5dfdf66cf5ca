import os
import re
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth.models import Group
from django.core.exceptions import SynchronousOnlyOperation, ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from simple_history.models import HistoricalRecords

from campus_agent.base.approval import POLICY_HELP, ApprovalPolicy
from campus_agent.base.crypto import secret_decrypt, secret_encrypt
from campus_agent.base.models import TimeStampedModel
from campus_agent.base.text import label_clean
from subagents_app.models import ALLOWED_GROUPS_HELP, SubAgent


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
            'sse / streamable-http：{"url": "https://mcp.example.edu.cn/mcp", "headers": {"X-Api-Key": "…"}}；'
            '服务要每位学生用自己的账号授权（OAuth）时加上 "oauth": {}（网关自动注册），'
            '或 "oauth": {"client_id": "…", "client_secret": "…", "scope": "…"}（在对方登记好的客户端）；'
            '网关用自己的凭据调用时写 "oauth": {"grant": "client_credentials", "client_id": "…", "client_secret": "…"'
            '（或 "private_key": PEM 私钥），"issuer": 授权服务器地址}。'
            "只有超级管理员可以修改：command 是服务器要运行的程序，url 和 headers 决定服务器连到哪里、带上什么凭据。"
        ),
    )
    oauth_origins = models.JSONField(
        "允许的授权服务器",
        default=list,
        blank=True,
        help_text=(
            "只用于带 “oauth” 的 sse / streamable-http 服务。授权时网关只访问本服务 url 所在的源（协议、主机和端口），"
            "服务指向别处（另一个端口、另一台主机）的授权请求一律拒绝，学生也不会拿到别处的授权链接。"
            '授权服务器在别处时（如学校统一身份认证），把它的源写在这里，如 ["https://idp.example.edu.cn"]；'
            '写 ["*"] 则允许服务指定的任何授权服务器。这里的地址若是内网地址（127.x、10.x、172.16–31.x、192.168.x、169.254.x 等），'
            "仍会被拒绝，除非服务器设置 OUTBOUND_PRIVATE_NETWORKS 包含它所在的网段。只有超级管理员可以修改。"
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
    # Every save keeps the old values (campus_agent.base.history: diff and rollback in admin). The
    # config's headers and env may be credentials: the live row holds them in clear already, so
    # the historical row may too, but the diff page never shows their values.
    allowed_groups = models.ManyToManyField(
        Group, blank=True, related_name="+", verbose_name="可用的用户组", help_text=ALLOWED_GROUPS_HELP
    )
    history = HistoricalRecords(m2m_fields=["allowed_groups"])

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
        from agents_app.validation import mcp_config_errors, oauth_origins_errors, tool_approvals_errors

        self.display_name = label_clean(self.display_name)  # students read it (docs/security.md#text-that-cannot-mislead)
        problems = {}
        if errors := mcp_config_errors(protocol=self.protocol, config=self.config):
            problems["config"] = errors
        if errors := oauth_origins_errors(self.oauth_origins):
            problems["oauth_origins"] = errors
        if errors := tool_approvals_errors(self.tool_approvals):
            problems["tool_approvals"] = errors
        if problems:
            raise ValidationError(problems)

    def tool_approval(self, *, tool: str, read_only: bool | None = None, destructive: bool | None = None) -> str:
        """The approval policy of one of its tools (docs/design.md#runs): the per-tool setting, else — for a
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


BASE_URL_ERROR = "请填写 http:// 或 https:// 开头的地址，如 https://dashscope.aliyuncs.com/compatible-mode/v1。"
ENV_NAME_ERROR = "环境变量名只能包含大写字母、数字和下划线，且不能以数字开头。"
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,99}")


def base_url_validate(value: str) -> None:
    """An http(s) URL with a host and nothing a URL cannot hold (spaces, control characters)."""
    parts = urlsplit(value or "")
    if (parts.scheme.lower() not in ("http", "https") or not parts.hostname
            or any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in value)):
        raise ValidationError(BASE_URL_ERROR)


def env_name_validate(value: str) -> None:
    if value and not _ENV_NAME.fullmatch(value):
        raise ValidationError(ENV_NAME_ERROR)


class Provider(TimeStampedModel):
    """An OpenAI-compatible model endpoint (DashScope, vLLM, OpenAI, Ollama …) agents may use.

    The API key is never stored in clear: `api_key_encrypted` holds its Fernet token
    (campus_agent.base.crypto), or `api_key_env` names the environment variable that holds it."""

    class Kind(models.TextChoices):
        DASHSCOPE = "dashscope", "DashScope（阿里云百炼）"
        VLLM = "vllm", "vLLM"
        OPENAI = "openai", "OpenAI"
        OLLAMA = "ollama", "Ollama"
        OTHER = "other", "其他（OpenAI 兼容）"

    name = models.CharField("名称", max_length=64, unique=True, help_text="管理员看到的名字，也记在回答消息上（按提供方统计用量）。")
    kind = models.CharField(
        "类型", max_length=16, choices=Kind.choices, default=Kind.OTHER,
        help_text="决定请求中如何开关“思考”：DashScope 用 enable_thinking，vLLM 用 chat_template_kwargs.enable_thinking，"
        "OpenAI 和 Ollama 用 reasoning_effort；“其他”不发送任何思考参数。",
    )
    base_url = models.CharField(
        "接口地址", max_length=500, validators=[base_url_validate],
        help_text="OpenAI 兼容接口的地址，如 https://dashscope.aliyuncs.com/compatible-mode/v1、http://10.0.0.5:8001/v1"
        "（vLLM）、http://127.0.0.1:11434/v1（Ollama）；末尾没有 /v1 时自动补上。",
    )
    api_key_encrypted = models.TextField("API 密钥（加密）", blank=True, default="", editable=False)
    api_key_env = models.CharField(
        "密钥环境变量", max_length=100, blank=True, validators=[env_name_validate],
        help_text="不在后台保存密钥时，填服务器上保存密钥的环境变量名（如 DASHSCOPE_API_KEY）；填了它就不用上面的密钥。",
    )
    default_model = models.CharField(
        "默认模型", max_length=100, help_text="智能体没有指定模型、或把本提供方用作备用时请求的模型，如 qwen-plus。"
    )
    timeout_sec = models.PositiveSmallIntegerField(
        "超时（秒）", default=60, validators=[MinValueValidator(1), MaxValueValidator(600)],
        help_text="一次模型请求中两次收到数据之间最长等待的秒数（1–600）；超时会重试或换用备用提供方。",
    )
    accepts_images = models.BooleanField(
        "模型接受图片", default=False,
        help_text="该提供方的模型能否读图片（image_url）：学生附的图片只发给能读图片的模型（智能体可以单独设置）。"
    )
    reasoning_back = models.BooleanField(
        "回传思考内容", default=True,
        help_text="思考模式下，模型调用了工具的那一轮的思考内容（reasoning_content）随那条消息发回模型，"
        "本轮和以后的对话都如此：DeepSeek V4、Kimi K2 的思考模式要求这样，否则拒绝请求（HTTP 400）。"
        "思考内容从不作为回答发回；不接受这个字段的服务请关闭。",
    )
    enabled = models.BooleanField("启用", default=True, help_text="停用后，用它的智能体跳过它（改用备用提供方或关键词路由）。")
    # No secret in a history row: the key's token is left out (a rollback keeps the current key).
    history = HistoricalRecords(excluded_fields=["api_key_encrypted"])

    class Meta:
        verbose_name = "模型提供方"
        verbose_name_plural = "模型提供方"
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(timeout_sec__gte=1, timeout_sec__lte=600), name="provider_timeout_range"
            ),
            models.CheckConstraint(
                condition=Q(kind__in=["dashscope", "vllm", "openai", "ollama", "other"]), name="provider_kind_valid"
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def api_key_set(self) -> bool:
        return bool(self.api_key_encrypted)

    def api_key_store(self, key: str | None) -> None:
        """Keeps `key` encrypted (None or "" removes it); saved with the row."""
        self.api_key_encrypted = secret_encrypt(key) if key else ""

    def api_key_plain(self) -> str:
        """The key to send: the environment variable's value when `api_key_env` is set, else the
        stored key decrypted ("" when there is none or it cannot be decrypted). Not named like the
        admin form's `api_key` field: a read-only admin page looks a field's name up on the object
        and calls what it finds."""
        if self.api_key_env:
            return os.environ.get(self.api_key_env, "")
        return secret_decrypt(self.api_key_encrypted) or ""

    @property
    def api_key_unreadable(self) -> bool:
        """A key is stored but cannot be decrypted (PROVIDER_KEY_SECRET or SECRET_KEY changed)."""
        return bool(self.api_key_encrypted) and secret_decrypt(self.api_key_encrypted) is None


class Agent(TimeStampedModel):
    """A main agent: the prompt, model and tools one chat turn runs with."""

    slug = models.SlugField(
        "标识", max_length=64, unique=True, help_text="API 中用它选择智能体（请求体的 agent 字段）。"
    )
    name = models.CharField("名称", max_length=100, help_text="学生在页面的智能体选择框里看到的名字。")
    system_prompt = models.TextField(
        "系统提示词", blank=True, help_text="每轮对话最先发给模型的说明：身份、语气、何时使用哪些工具。"
    )
    class Thinking(models.TextChoices):
        DEFAULT = "", "默认（不发送思考参数）"
        ON = "on", "开"
        OFF = "off", "关"

    provider = models.ForeignKey(
        # PROTECT: deleting a provider an agent uses is refused (admin names the agents), rather
        # than moving them to the default provider without a word.
        Provider, on_delete=models.PROTECT, null=True, blank=True, related_name="agents", verbose_name="模型提供方",
        help_text="留空则用环境变量 LLM_BASE_URL / LLM_API_KEY / LLM_MODEL 配置的默认提供方。",
    )
    model = models.CharField(
        "模型", max_length=100, blank=True,
        help_text="留空则用所选提供方的默认模型（未选提供方时用环境变量 LLM_MODEL，如 qwen-plus）。只用于上面的提供方，备用提供方用它们自己的模型。",
    )
    thinking = models.CharField(
        "思考", max_length=4, choices=Thinking.choices, blank=True, default=Thinking.DEFAULT,
        help_text="思考模型（如 Qwen3）是否先思考再回答。“默认”不发送参数，由模型服务自己决定；开/关按提供方的类型发送对应参数。",
    )
    temperature = models.FloatField(
        "温度",
        default=0.7,
        validators=[MinValueValidator(0.0), MaxValueValidator(2.0)],
        help_text="0–2，越低回答越稳定，越高越发散。",
    )
    # None: as its provider says (Provider.accepts_images); docs/design.md#attachments.
    accepts_images = models.BooleanField(
        "模型接受图片", null=True, blank=True, default=None,
        help_text="学生附的图片是否作为图片发给模型（image_url）。留空：跟随模型提供方的设置。"
                  "不接受时模型只知道文件名，页面提示学生。",
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
    knowledge_collections = models.ManyToManyField(
        "knowledge_app.KnowledgeCollection", blank=True, related_name="agents", verbose_name="知识库",
        help_text="该智能体可检索的知识库：每个知识库是一个工具 search_<标识>，模型据知识库的说明决定何时检索。",
    )
    allowed_groups = models.ManyToManyField(
        Group, blank=True, related_name="+", verbose_name="可用的用户组", help_text=ALLOWED_GROUPS_HELP
    )
    # The tool links are tracked too, so a rollback restores the prompt with the tools it was written for.
    history = HistoricalRecords(m2m_fields=["mcp_services", "sub_agents", "knowledge_collections", "allowed_groups"])

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

    def reads_images(self) -> bool:
        """Whether a student's attached images go to its model as images (docs/design.md#attachments): its own
        setting, else its provider's (no provider of its own: LLM_ACCEPTS_IMAGES). Sync."""
        if self.accepts_images is not None:
            return self.accepts_images
        if self.provider_id is None:
            return settings.LLM_ACCEPTS_IMAGES
        return bool(self.provider and self.provider.accepts_images)

    @property
    def effective_model(self) -> str:
        """The model the agent's own provider is asked for: its model field, else its provider's
        default model, else LLM_MODEL (no provider: the default provider from LLM_*)."""
        if self.model:
            return self.model
        if self.provider_id is None:
            return settings.LLM_MODEL
        try:
            provider = self.provider  # loaded with the turn (selectors.agent_catalog_load)
        except SynchronousOnlyOperation:  # not loaded, and this is async code: no query here
            return ""
        return provider.default_model if provider is not None else settings.LLM_MODEL

    def clean(self) -> None:
        self.name = label_clean(self.name)  # students read it (docs/security.md#text-that-cannot-mislead)
        if self.is_default:
            others = Agent.objects.filter(is_default=True).exclude(pk=self.pk)
            if others.exists():
                raise ValidationError({"is_default": f"已有默认智能体“{others.first().name}”，请先取消它的默认。"})
        if self.is_default and not self.enabled:
            raise ValidationError({"enabled": "默认智能体必须启用。"})


class AgentFallback(models.Model):
    """One provider of an agent's fallback list, in order (`position`, lowest first)."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="fallbacks", verbose_name="智能体")
    provider = models.ForeignKey(
        Provider, on_delete=models.CASCADE, related_name="fallback_for", verbose_name="备用提供方"
    )
    position = models.PositiveSmallIntegerField(
        "顺序", default=0,
        help_text="数字小的先试：智能体自己的提供方重试后仍失败时，按顺序逐个尝试备用提供方（停用的跳过），都失败时由关键词路由回答。",
    )
    model = models.CharField(
        "模型", max_length=100, blank=True, help_text="留空则用该提供方的默认模型。"
    )

    class Meta:
        verbose_name = "备用提供方"
        verbose_name_plural = "备用提供方"
        ordering = ["position", "id"]
        constraints = [
            models.UniqueConstraint(fields=["agent", "provider"], name="agentfallback_unique_provider"),
        ]

    def __str__(self) -> str:
        return f"{self.position}. {self.provider}"


class McpOAuthClient(models.Model):
    """How the gateway is known to the authorization server of an MCP service that needs each
    student's authorization (`config.oauth`, agents_app/mcp/oauth.py): the client record its
    dynamic registration returned, or the client ID metadata document's URL it used, one per
    service, shared by every student. Encrypted (campus_agent.base.crypto): a registration may carry
    a client secret. A client that staff pre-registered is in the service's config instead."""

    service = models.OneToOneField(McpService, on_delete=models.CASCADE, related_name="oauth_client",
                                   verbose_name="MCP 服务")
    client_info_encrypted = models.TextField("客户端信息（加密）", editable=False)
    updated_at = models.DateTimeField("更新时间", auto_now=True)

    class Meta:
        verbose_name = "MCP 授权客户端"
        verbose_name_plural = "MCP 授权客户端"

    def __str__(self) -> str:
        return str(self.service)


class McpOAuthGrant(models.Model):
    """One student's authorization of one MCP service: the tokens its authorization server
    issued, encrypted (campus_agent.base.crypto); removed when the student or staff disconnect it."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="mcp_oauth_grants",
                             verbose_name="学生")
    service = models.ForeignKey(McpService, on_delete=models.CASCADE, related_name="oauth_grants",
                                verbose_name="MCP 服务")
    tokens_encrypted = models.TextField("令牌（加密）", editable=False)
    scope = models.CharField("授权范围", max_length=1000, blank=True, default="")
    expires_at = models.DateTimeField("访问令牌到期", null=True, blank=True)
    # The authorization server's RFC 7009 endpoint (its metadata's), where a disconnect revokes the tokens.
    revocation_endpoint = models.URLField("撤销端点", max_length=2000, blank=True, default="", editable=False)
    created_at = models.DateTimeField("首次授权", auto_now_add=True)
    updated_at = models.DateTimeField("更新时间", auto_now=True)

    class Meta:
        verbose_name = "学生的 MCP 授权"
        verbose_name_plural = "学生的 MCP 授权"
        ordering = ["-updated_at"]
        constraints = [
            models.UniqueConstraint(fields=["user", "service"], name="mcpoauthgrant_one_per_user_service"),
        ]

    def __str__(self) -> str:
        return f"{self.user} · {self.service}"


class McpOAuthPending(models.Model):
    """An authorization a student was sent to make and has not come back from yet: what the
    callback needs to take the authorization server's code (agents_app/mcp/oauth.py), found by
    its `state`. The PKCE verifier is encrypted; the row goes once used, or when it expires."""

    state = models.CharField(max_length=64, unique=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    service = models.ForeignKey(McpService, on_delete=models.CASCADE, related_name="+")
    verifier_encrypted = models.TextField(editable=False)
    url = models.TextField(editable=False)  # the page handed out: handed out again while it is good
    # What the discovery found (the server's metadata, the scope asked for, the resource): the
    # code exchange goes to the same token endpoint with the same parameters.
    flow = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["expires_at"], name="mcpoauthpending_expiry")]


class CatalogStamp(models.Model):
    """One row whose `token` a database trigger replaces with a random one at every write to a
    table a turn's agent catalog is read from (agents_app.catalog_cache): a worker keeps the
    catalog it read and reads it again only when the token it read it with has changed. A
    trigger, not a Django signal, so a write by any process and by any means (admin, the catalog
    import, `QuerySet.update()`, SQL typed in a console) counts."""

    token = models.CharField("版本标记", max_length=32)

    class Meta:
        verbose_name = verbose_name_plural = "目录版本标记"

    def __str__(self) -> str:
        return self.token
