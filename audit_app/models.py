"""The audit log (docs/design.md#campus-identity-and-audit): one row per event, append-only and
chained by hash. Rows are written only by audit_app.chain.audit_record."""

from django.conf import settings
from django.db import models

GENESIS_HASH = "0" * 64  # the prev_hash of the chain's first row


class AuditEvent(models.Model):
    class Event(models.TextChoices):
        SIGN_IN = "sign_in", "登录"
        SIGN_OUT = "sign_out", "退出登录"
        API_KEY_CREATED = "api_key_created", "创建 API 密钥"
        API_KEY_REVOKED = "api_key_revoked", "吊销 API 密钥"
        STAFF_CHANGE = "staff_change", "后台修改"
        ROLLBACK = "rollback", "回滚"
        DATA_EXPORT = "data_export", "导出个人数据"
        DATA_DELETION = "data_deletion", "删除个人数据"
        APPROVAL_DECISION = "approval_decision", "审批决定"
        AUDIT_EXPORT = "audit_export", "导出审计日志"
        AUDIT_PURGE = "audit_purge", "清理过期审计日志"
        MODERATION_HIT = "moderation_hit", "内容安全命中"
        REPORT_FILED = "report_filed", "举报回答"
        REPORT_HANDLED = "report_handled", "处理举报"

    class Outcome(models.TextChoices):
        OK = "ok", "成功"
        REFUSED = "refused", "拒绝"
        FAILED = "failed", "失败"

    # Assigned under the chain's lock: consecutive, so a missing row shows as a gap.
    id = models.BigIntegerField("序号", primary_key=True, editable=False)
    time = models.DateTimeField("时间", editable=False)
    # No database constraint and no cascade: deleting a user must not change (or be refused by)
    # the rows that record what they did; the username stays beside the id.
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        null=True,
        blank=True,
        related_name="+",
        verbose_name="操作者",
    )
    actor_username = models.CharField("操作者账号", max_length=150, blank=True, default="")
    source = models.CharField("来源地址", max_length=64, blank=True, default="")
    event = models.CharField("事件", max_length=32, choices=Event.choices)
    target = models.CharField("对象", max_length=255, blank=True, default="")
    outcome = models.CharField("结果", max_length=16, choices=Outcome.choices)
    request_id = models.CharField("请求 ID", max_length=64, blank=True, default="")
    details = models.JSONField("详情", default=dict, blank=True)
    prev_hash = models.CharField("前一条的哈希", max_length=64)
    hash = models.CharField("哈希", max_length=64)

    class Meta:
        verbose_name = "审计日志"
        verbose_name_plural = "审计日志"
        ordering = ["-id"]
        permissions = [("export_auditevent", "Can export audit events")]
        default_permissions = ("view",)  # nobody adds, changes or deletes a row (the purge is a command)
        indexes = [
            models.Index(fields=["actor", "time"], name="audit_actor_time"),
            models.Index(fields=["actor_username", "time"], name="audit_username_time"),
            models.Index(fields=["time"], name="audit_time"),
            models.Index(fields=["request_id"], name="audit_request_id"),  # the admin's search
        ]

    def __str__(self) -> str:
        return f"#{self.id} {self.get_event_display()} {self.actor_username or '-'}"


class AuditChainHead(models.Model):
    """One row: the chain's last id and hash. An append locks it first, so two workers never
    chain onto the same row; verify checks the table ends where the head says."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    last_id = models.BigIntegerField(default=0)
    last_hash = models.CharField(max_length=64, default=GENESIS_HASH)

    class Meta:
        default_permissions = ()
