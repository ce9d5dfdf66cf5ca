import uuid

from django.conf import settings
from django.contrib.auth.models import Group
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q
from django.db.models.signals import post_delete
from django.dispatch import receiver
from django.utils import timezone

from agents_app.models import Agent
from campus_agent.base.models import TimeStampedModel

DEFAULT_TITLE = "新对话"


class Conversation(TimeStampedModel):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="conversations", verbose_name="用户"
    )
    agent = models.ForeignKey(
        Agent, on_delete=models.SET_NULL, null=True, blank=True, related_name="conversations", verbose_name="智能体"
    )
    title = models.CharField("标题", max_length=64, default=DEFAULT_TITLE)
    hint_domain = models.CharField("业务域提示", max_length=64, blank=True, default="")

    class Meta:
        verbose_name = "对话"
        verbose_name_plural = "对话"
        ordering = ["-updated_at"]
        indexes = [models.Index(fields=["user", "-updated_at"], name="conversation_user_recent")]

    def __str__(self) -> str:
        return self.title


class Message(models.Model):
    class Role(models.TextChoices):
        USER = "user", "用户"
        ASSISTANT = "assistant", "助手"
        TOOL = "tool", "工具"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="messages", verbose_name="对话"
    )
    role = models.CharField("角色", max_length=16, choices=Role.choices)
    content = models.TextField("内容", blank=True, default="")
    meta = models.JSONField(
        "元数据",
        default=dict,
        blank=True,
        help_text="tool_calls（调用了工具的助手消息）、tool_call_id 与 tool（工具消息）、interrupted、usage。",
    )
    chart = models.JSONField("图表", null=True, blank=True)
    agent_name = models.CharField("智能体", max_length=100, blank=True, default="")
    request_id = models.CharField("请求 ID", max_length=64, blank=True, default="", db_index=True)
    # A default, not auto_now_add (which stamps each row of a batch with its own instant): the
    # rows of a turn are written with the one instant they share (chat_app.runs.recording.turn_store).
    created_at = models.DateTimeField("创建时间", default=timezone.now, editable=False, db_index=True)
    # Rows stored in one batch share a timestamp; seq keeps them in the order they were appended.
    seq = models.PositiveIntegerField("序号", default=0)
    # Regenerate / edit-and-resend set the last turn aside (its question and answer rows) before
    # the new run starts: the model no longer sees it, the page shows it as an earlier version of
    # the turn that follows it (docs/api.md, "Regenerate and edit").
    superseded = models.BooleanField(
        "已被替换", default=False, help_text="被“重新生成”或“编辑后重发”替换的旧问答：不再发给模型，页面作为可翻看的旧版本显示。"
    )
    # The turn's token usage (all its model requests), on its final assistant row; 0 on every
    # other row and on keyword-routed turns. Columns, not meta, so reports sum them in SQL.
    prompt_tokens = models.PositiveIntegerField("输入 tokens", default=0)
    completion_tokens = models.PositiveIntegerField("输出 tokens", default=0)
    cached_tokens = models.PositiveIntegerField(
        "缓存命中 tokens", default=0, help_text="输入 tokens 中命中模型服务缓存的部分（服务商报告时才有）。"
    )
    model = models.CharField("模型", max_length=100, blank=True, default="", help_text="回答这一轮的模型；关键词路由回答时为空。")

    class Meta:
        verbose_name = "消息"
        verbose_name_plural = "消息"
        ordering = ["created_at", "seq"]
        constraints = [
            models.CheckConstraint(condition=Q(role__in=["user", "assistant", "tool"]), name="message_role_valid"),
        ]
        indexes = [models.Index(fields=["conversation", "created_at", "seq"], name="message_conversation_order")]

    def __str__(self) -> str:
        return f"{self.role}: {self.content[:30]}"


class AuthSession(models.Model):
    """A server-side login session that a JWT names in its `sid` claim.

    The campus token is a credential, so it lives here and not in the JWT (anyone holding a JWT
    can decode its payload). Deleting the row (logout, admin) revokes every JWT naming it.

    `password_fingerprint` is the user's session auth hash when the row was made (Django's own
    rule for page sessions, `get_session_auth_hash`: an HMAC of the stored password hash). A
    password change alters it, so every JWT issued before the change stops being valid.
    """

    class Via(models.TextChoices):
        PASSWORD = "password", "用户名密码"
        SSO = "sso", "校园统一认证"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="auth_sessions", verbose_name="用户"
    )
    via = models.CharField("登录方式", max_length=16, choices=Via.choices, default=Via.PASSWORD)
    roles = models.JSONField("角色", default=list, blank=True)
    # Sent to sub-agents only (docs/design.md#cross-cutting-rules); never logged, never in frames or the JWT payload.
    campus_token = models.TextField("校园令牌", blank=True, default="")
    password_fingerprint = models.CharField("密码指纹", max_length=128, blank=True, default="", editable=False)
    created_at = models.DateTimeField("创建时间", auto_now_add=True)
    expires_at = models.DateTimeField("过期时间", db_index=True)

    class Meta:
        verbose_name = "登录会话"
        verbose_name_plural = "登录会话"
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.user_id} · {self.get_via_display()} · {self.created_at:%Y-%m-%d %H:%M}"

    def __repr__(self) -> str:  # never print the campus token, whoever logs the row
        return f"<AuthSession {self.id} user={self.user_id} via={self.via}>"


class ApiKey(models.Model):
    """A personal API key (docs/design.md#other-clients): acts as its user wherever a JWT is accepted, for clients
    that cannot log in (OpenAI-compatible apps, MCP and A2A clients). The secret is shown once;
    only its SHA-256 is kept (a 192-bit random key needs no slow hash: nothing to guess), and
    its first characters (`prefix`) to tell keys apart in a list and in a leak report."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_keys", verbose_name="用户"
    )
    name = models.CharField("名称", max_length=64)
    prefix = models.CharField("前缀", max_length=16, editable=False, help_text="密钥的前几个字符，用来辨认是哪一把。")
    key_hash = models.CharField("密钥摘要", max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField("创建时间", auto_now_add=True)
    last_used_at = models.DateTimeField("最近使用", null=True, blank=True, editable=False)
    expires_at = models.DateTimeField("过期时间", null=True, blank=True, help_text="留空：不过期。")
    revoked_at = models.DateTimeField("吊销时间", null=True, blank=True, editable=False, db_index=True)

    class Meta:
        verbose_name = "API 密钥"
        verbose_name_plural = "API 密钥"
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name}（{self.prefix}…）"

    def __repr__(self) -> str:
        return f"<ApiKey {self.id} user={self.user_id} prefix={self.prefix}>"


class CampusIdentity(models.Model):
    """The link from a campus login's subject (an OIDC `sub`, a CAS user) to the local user it
    logs in as, with what the campus said about the person at the last login.

    Campus logins find their user through this row, never by username: a campus subject that
    happens to equal a local username (e.g. the demo superuser `admin`) must not log in as that
    account. The first login of a subject creates a new user and this row.
    """

    class Source(models.TextChoices):
        OIDC = "oidc", "OpenID Connect"
        CAS = "cas", "CAS 统一身份认证"

    source = models.CharField("登录方式", max_length=8, choices=Source.choices, default=Source.OIDC)
    sub = models.CharField("校园账号标识", max_length=150, help_text="OIDC 的 sub；CAS 的学号 / 工号")
    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="campus_identity", verbose_name="用户"
    )
    roles = models.JSONField("最近一次登录的校园角色", default=list, blank=True)
    college = models.CharField("学院 / 单位", max_length=150, blank=True, default="")
    identity_type = models.CharField("身份类型", max_length=150, blank=True, default="")
    attributes = models.JSONField(
        "最近一次登录的校园属性", default=dict, blank=True,
        help_text="CAS 属性或 OIDC 声明（每个值一个列表），群组映射按它们决定用户所在的群组",
    )
    created_at = models.DateTimeField("创建时间", auto_now_add=True)
    updated_at = models.DateTimeField("最近登录", auto_now=True)

    class Meta:
        verbose_name = "校园身份"
        verbose_name_plural = "校园身份"
        ordering = ["-updated_at"]
        constraints = [models.UniqueConstraint(fields=["source", "sub"], name="campus_identity_source_sub")]

    def __str__(self) -> str:
        return self.sub


class GroupMapping(models.Model):
    """One rule of "groups from the campus" (docs/design.md#campus-identity-and-audit): a campus
    login whose attribute (CAS) or claim (OIDC) holds the value is put in the group. Applied at
    every login of that source; a group the rules no longer give is taken back."""

    source = models.CharField("登录方式", max_length=8, choices=CampusIdentity.Source.choices)
    attribute = models.CharField("属性 / 声明", max_length=100, help_text="例如 CAS 属性 userType，或 OIDC 声明 roles")
    value = models.CharField("取值", max_length=200, help_text="完全相同才算匹配；多值属性中有一个相同即可，例如 本科生")
    group = models.ForeignKey("auth.Group", on_delete=models.CASCADE, related_name="campus_mappings", verbose_name="群组")

    class Meta:
        verbose_name = "群组映射"
        verbose_name_plural = "群组映射"
        ordering = ["source", "attribute", "value"]
        constraints = [
            models.UniqueConstraint(fields=["source", "attribute", "value", "group"], name="group_mapping_unique")
        ]

    def __str__(self) -> str:
        return f"{self.get_source_display()} {self.attribute}={self.value} → {self.group}"


class CampusGroupGrant(models.Model):
    """Marks a membership the group mapping gave (the user is in `group` because of a rule), so
    the next login can take it back when no rule gives it any more; a membership without this
    mark was given by hand and is never touched by the mapping."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="campus_group_grants", verbose_name="用户"
    )
    group = models.ForeignKey("auth.Group", on_delete=models.CASCADE, related_name="+", verbose_name="群组")
    granted_at = models.DateTimeField("映射加入时间", auto_now_add=True)

    class Meta:
        verbose_name = "映射得到的群组成员资格"
        verbose_name_plural = "映射得到的群组成员资格"
        constraints = [models.UniqueConstraint(fields=["user", "group"], name="campus_group_grant_unique")]


class Run(models.Model):
    """One chat turn as the server runs it (docs/design.md#runs): it outlives the request that started it.

    The worker named in `worker` runs it and refreshes `heartbeat_at` every RUN_HEARTBEAT_SEC,
    writing the reply text not yet stored into `partial_text` at the same time; a run whose
    heartbeat is older than RUN_STALE_SEC lost its worker and is finished as interrupted by
    another one (chat_app.runs.supervisor).
    """

    class Status(models.TextChoices):
        """The run's states; only chat_app.runs.state moves a run between them (RUN_MOVES)."""

        RUNNING = "running", "进行中"
        WAITING = "waiting", "等待用户"  # paused for a person: its Wait rows say for what
        FINISHED = "finished", "已完成"
        INTERRUPTED = "interrupted", "已中断"

    ACTIVE = (Status.RUNNING, Status.WAITING)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="runs", verbose_name="对话")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="chat_runs", verbose_name="用户"
    )
    status = models.CharField("状态", max_length=20, choices=Status.choices, default=Status.RUNNING)
    worker = models.CharField("所在进程", max_length=128, blank=True, default="")
    heartbeat_at = models.DateTimeField("心跳时间")
    started_at = models.DateTimeField("开始时间", auto_now_add=True)
    ended_at = models.DateTimeField("结束时间", null=True, blank=True)
    request_id = models.CharField("请求 ID", max_length=64, blank=True, default="")
    # The final assistant row's id, announced in `session` and `done` before the row exists.
    message_id = models.UUIDField("回答消息 ID", default=uuid.uuid4)
    agent_name = models.CharField("智能体", max_length=100, blank=True, default="")
    # Reply text streamed but not yet stored (checkpoint); emptied when the run ends.
    partial_text = models.TextField("未保存的回答", blank=True, default="")
    # The stream slot's lease key in the cache, given back by whoever ends the run.
    slot_key = models.CharField(max_length=128, blank=True, default="")
    # While it waits for a person (no worker runs it): the last frame it sent, so whichever
    # worker resumes it numbers on from there, and what its turn had so far (round count, text,
    # usage, chart: agents_app.runtime.loop.TurnState).
    frames_seq = models.PositiveIntegerField(default=0)
    resume_state = models.JSONField(default=dict, blank=True)
    # The language the student asked in (docs/design.md#cross-cutting-rules): the texts the gateway writes into this run
    # are in it, on whichever worker resumes or reaps the run. Empty: LANGUAGE_CODE.
    language = models.CharField("语言", max_length=10, blank=True, default="")

    class Meta:
        verbose_name = "运行"
        verbose_name_plural = "运行"
        ordering = ["-started_at"]
        indexes = [
            models.Index(fields=["status", "heartbeat_at"], name="run_status_heartbeat"),
            models.Index(fields=["conversation", "status"], name="run_conversation_status"),
        ]
        constraints = [
            # One run per conversation at a time (docs/design.md#runs): two questions sent at once,
            # on any workers, cannot both start one; the later answers 409 40905 (chat_app.runs.admission).
            models.UniqueConstraint(fields=["conversation"], condition=models.Q(status__in=["running", "waiting"]),
                                    name="run_one_active_per_conversation"),
        ]

    def __str__(self) -> str:
        return f"{self.id} · {self.get_status_display()}"

    @property
    def active(self) -> bool:
        return self.status in self.ACTIVE


class Wait(models.Model):
    """A tool call of a run that waits for a person (docs/design.md#waiting-for-a-person), one row
    per call and pause. What the person is asked depends on the kind and is `ask`, typed and
    checked by its kind in chat_app/runs/wait.py (the only code that writes these rows); what they
    answered a question is `answer`. `status` is how the wait ended: "approved" is the person's
    yes, whatever the kind (the call approved, their account connected, the question answered)."""

    class Kind(models.TextChoices):
        APPROVAL = "approval", "批准调用"
        # The call's MCP service needs the student's own account (agents_app/mcp/oauth.py): the
        # authorization server's callback says yes.
        AUTHORIZATION = "authorization", "连接账号"
        # The call's MCP server asked the student something (agents_app/mcp/person.py); the call
        # runs again, handing its server the answer.
        ELICITATION = "elicitation", "回答服务的问题"
        # The call's A2A sub-agent asked the student something (`input-required`); the call's next
        # run sends the answer on in the same A2A task.
        QUESTION = "question", "回答子 Agent 的问题"

    class Status(models.TextChoices):
        PENDING = "pending", "待决定"
        APPROVED = "approved", "已批准"
        REJECTED = "rejected", "已拒绝"
        EXPIRED = "expired", "已超时"
        CANCELLED = "cancelled", "已取消"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="waits", verbose_name="运行")
    # The run's frames_seq when it paused for this call: which pause of the run it belongs to.
    pause_seq = models.PositiveIntegerField(default=0)
    kind = models.CharField("等待", max_length=16, choices=Kind.choices, default=Kind.APPROVAL)
    call_id = models.CharField("调用 ID", max_length=128)
    tool = models.CharField("工具", max_length=64)
    args = models.TextField("参数（JSON）", default="{}")
    ask = models.JSONField("问的内容", default=dict, blank=True,
                           help_text="随等待的种类而定：连接账号为服务与授权页面，回答问题为问题、表单与续接信息。")
    answer = models.JSONField("回答", null=True, blank=True)
    status = models.CharField("状态", max_length=10, choices=Status.choices, default=Status.PENDING)
    created_at = models.DateTimeField("请求时间", auto_now_add=True)
    expires_at = models.DateTimeField("截止时间")
    decided_at = models.DateTimeField("决定时间", null=True, blank=True)

    class Meta:
        verbose_name = "等待学生的调用"
        verbose_name_plural = "等待学生的调用"
        ordering = ["created_at", "id"]
        # One row per call and pause: a call whose server asks again waits again, in a later pause.
        constraints = [models.UniqueConstraint(fields=["run", "call_id", "pause_seq"], name="wait_run_call_pause")]
        indexes = [models.Index(fields=["status", "expires_at"], name="wait_status_expiry")]

    def __str__(self) -> str:
        return f"{self.tool} · {self.get_kind_display()} · {self.get_status_display()}"


FEEDBACK_COMMENT_MAX = 1000


class Feedback(models.Model):
    """A student's thumbs up or down on one answer (its final assistant row), with an optional
    comment. One per user and answer: rating again replaces it."""

    class Rating(models.TextChoices):
        UP = "up", "有帮助"
        DOWN = "down", "没帮助"

    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="feedback", verbose_name="回答")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="answer_feedback", verbose_name="用户"
    )
    rating = models.CharField("评价", max_length=8, choices=Rating.choices)
    comment = models.TextField("意见", blank=True, default="", max_length=FEEDBACK_COMMENT_MAX)
    created_at = models.DateTimeField("创建时间", auto_now_add=True)
    updated_at = models.DateTimeField("更新时间", auto_now=True, db_index=True)

    class Meta:
        verbose_name = "回答评价"
        verbose_name_plural = "回答评价"
        ordering = ["-updated_at"]
        constraints = [
            models.UniqueConstraint(fields=["message", "user"], name="feedback_one_per_user"),
            models.CheckConstraint(condition=Q(rating__in=["up", "down"]), name="feedback_rating_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.get_rating_display()} · {self.message_id}"


class Preference(models.Model):
    """What a student chose on the page: their language (docs/design.md#cross-cutting-rules), set again as the language
    cookie each time they log in, on any device."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, primary_key=True,
                                related_name="preference", verbose_name="用户")
    language = models.CharField("语言", max_length=10, choices=settings.LANGUAGES, default=settings.LANGUAGE_CODE)

    class Meta:
        verbose_name = verbose_name_plural = "学生偏好"

    def __str__(self) -> str:
        return self.get_language_display()


class GroupLimits(models.Model):
    """A group's own daily token quota and message rate (chat_app/runs/group_limits.py): a user's
    limit is the most generous of their groups', a group without a value counting as the global
    setting (docs/design.md#campus-identity-and-audit)."""

    group = models.OneToOneField(Group, on_delete=models.CASCADE, primary_key=True, related_name="chat_limits",
                                 verbose_name="用户组")
    daily_token_quota = models.PositiveIntegerField(
        "每日 token 额度", null=True, blank=True,
        help_text="该组成员每天最多用多少 token（提问 + 回答）；0 = 不限；留空 = 跟随全局设置 "
                  "USER_DAILY_TOKEN_QUOTA。一个人在几个组里时，取对他最宽松的那个。",
    )
    chat_rate_per_minute = models.PositiveIntegerField(
        "每分钟提问数", null=True, blank=True, validators=[MinValueValidator(1)],
        help_text="该组成员每分钟最多发几个新问题；留空 = 跟随全局设置 CHAT_RATE_PER_MINUTE。"
                  "一个人在几个组里时，取最多的那个。",
    )

    class Meta:
        verbose_name = verbose_name_plural = "用户组额度"

    def __str__(self) -> str:
        return self.group.name


def _upload_path(upload: "Upload", filename: str) -> str:
    # The stored name is the upload's id: the student's file name is shown, never used as a path.
    return f"uploads/{upload.user_id}/{upload.id}"


class Upload(models.Model):
    """A file a student attached (docs/design.md#attachments): its bytes in Django's storage (local by default),
    the type read from the content, and for a document the text the model reads. Linked to the
    conversation it was sent in, and removed with it (the stored file too); served only to its
    owner."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="uploads",
                             verbose_name="用户")
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="uploads", null=True,
                                     blank=True, verbose_name="对话")
    name = models.CharField("文件名", max_length=120)
    content_type = models.CharField("类型", max_length=100)
    size = models.PositiveIntegerField("大小（字节）")
    sha256 = models.CharField(max_length=64)
    file = models.FileField(upload_to=_upload_path, max_length=200)
    text = models.TextField("提取的文字", blank=True, default="")
    text_cut = models.BooleanField("文字已截断", default=False)
    created_at = models.DateTimeField("上传时间", auto_now_add=True)

    class Meta:
        verbose_name = verbose_name_plural = "附件"
        ordering = ["created_at"]
        indexes = [models.Index(fields=["user", "created_at"], name="upload_user_created")]

    def __str__(self) -> str:
        return self.name

    @property
    def is_image(self) -> bool:
        return self.content_type.startswith("image/")


@receiver(post_delete, sender=Upload)
def _upload_file_delete(sender, instance: Upload, **kwargs) -> None:
    """A deleted upload (its conversation deleted, the student's data purged) takes its stored
    file with it."""
    if instance.file:
        instance.file.delete(save=False)
