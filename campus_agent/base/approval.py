"""Approval policies of tools (docs/design.md#waiting-for-a-person): shared by MCP services and sub-agents."""
from django.db import models


class ApprovalPolicy(models.TextChoices):
    AUTO = "auto", "直接运行"
    ASK = "ask", "先经学生确认"
    NEVER = "never", "禁用（不提供给模型）"


POLICY_HELP = (
    "直接运行：模型调用即执行。先经学生确认：运行前在对话里请学生批准或拒绝（审批时限内未决定视为拒绝，默认 10 分钟）。"
    "禁用：不提供给模型。会改变数据的操作（选课、预约、发通知）应设为“先经学生确认”。"
)
