from django import forms
from django.contrib import admin, messages
from django.utils.html import format_html, format_html_join

from campus_agent.base.admin_extensions import ExtensibleAdmin
from campus_agent.base.admin_history import CatalogHistoryAdmin
from campus_agent.base.circuit import circuit_close, circuit_status, circuit_status_text
from subagents_app.a2a_card import AgentCardError, AgentCardInfo, agent_card_description, agent_card_fetch
from subagents_app.client import subagent_circuit_key
from subagents_app.health import HEALTH_TIMEOUT_MAX_SEC, subagent_health_check
from subagents_app.models import SubAgent

NOT_OFFERED_TEXT = (
    "还没有智能体使用子 Agent “{name}”：到 智能体 → 打开一个智能体 → 在“子 Agent”里勾选它并保存，模型才会看到并调用它。"
)
CIRCUIT_CLOSED_TEXT = "子 Agent {name} 已恢复应答，熔断已解除。"
CARD_PREFILL_FAILED_TEXT = "描述留空时要从 Agent Card 的技能生成，但{reason}。请手动填写描述，或检查服务地址。"
CARD_NO_SKILLS_TEXT = "Agent Card 没有名称、描述或技能可用来生成描述，请手动填写。"
CARD_NOT_A2A_TEXT = "子 Agent {name} 不是 A2A 协议，没有 Agent Card。"
CARD_FAILED_TEXT = "子 Agent {name}：{reason}"
CARD_SAVED_UNREAD_TEXT = "已保存，但暂时读不到 Agent Card（{reason}）：学生调用它会失败，请检查服务地址。"

# The gateway sends students' campus tokens to the base URL, and the protocol decides which URL
# that is (the seed path, or the one an Agent Card names): only superusers may point them
# somewhere (other staff see them read-only; `import_subagents` needs shell access, already trusted).
SUPERUSER_ONLY_FIELDS = ("protocol", "base_url")


def _card_fetch(base_url: str) -> AgentCardInfo:
    return agent_card_fetch(base_url=base_url, timeout=HEALTH_TIMEOUT_MAX_SEC)


class SubAgentForm(forms.ModelForm):
    """An A2A sub-agent's description may be left empty: it is then made from its Agent Card."""

    class Meta:
        model = SubAgent
        fields = "__all__"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "description" in self.fields:
            self.fields["description"].required = False
            self.fields["description"].help_text += " A2A 子 Agent 可留空：保存时从其 Agent Card 的技能生成。"

    def clean(self):
        cleaned = super().clean()
        if "description" not in self.fields or (cleaned.get("description") or "").strip():
            return cleaned
        protocol = cleaned.get("protocol", self.instance.protocol)
        base_url = cleaned.get("base_url", self.instance.base_url)
        if protocol != SubAgent.Protocol.A2A:
            self.add_error("description", self.fields["description"].error_messages["required"])
        elif base_url and "base_url" not in self.errors:
            self._description_from_card(cleaned, base_url)
        return cleaned

    def _description_from_card(self, cleaned: dict, base_url: str) -> None:
        try:
            info = self.card_info = _card_fetch(base_url)  # shown after the save without a second fetch
        except AgentCardError as exc:
            self.add_error("description", CARD_PREFILL_FAILED_TEXT.format(reason=exc.message))
            return
        description = agent_card_description(info)
        if description:
            cleaned["description"] = description
        else:
            self.add_error("description", CARD_NO_SKILLS_TEXT)


def agent_card_html(name: str, info: AgentCardInfo) -> str:
    """The card as staff read it; every value from the card is escaped (format_html)."""
    skills = format_html_join(
        "", "<li><strong>{}</strong>：{}{}</li>",
        ((s.name, s.description, f"（例如：{'；'.join(s.examples[:3])}）" if s.examples else "")
         for s in info.skills[:20]),
    )
    problem = format_html("无法调用：{}", info.problem) if info.problem else ""
    return format_html(
        "子 Agent {} 的 Agent Card：<strong>{}</strong> — {}<br>流式输出：{}；要求 Bearer 认证：{}；调用地址：{}"
        "<ul>{}</ul>{}",
        name, info.name or "（无名称）", info.description or "（无描述）", "支持" if info.streaming else "不支持（普通发送）",
        "是（发送学生的校园令牌）" if info.bearer else "否", info.rpc_url or "—", skills or "（无技能）", problem,
    )


@admin.register(SubAgent)
class SubAgentAdmin(ExtensibleAdmin, CatalogHistoryAdmin):
    form = SubAgentForm
    list_display = (
        "name", "display_name", "protocol", "domain", "base_url", "timeout_sec", "approval_policy", "enabled",
        "circuit", "updated_at",
    )
    list_filter = ("enabled", "protocol", "domain", "approval_policy")
    search_fields = ("name", "display_name", "description", "base_url", "domain")
    readonly_fields = ("created_at", "updated_at")
    filter_horizontal = ("allowed_groups",)
    actions = ["health_check", "show_agent_card"]
    fieldsets = (
        (None, {"fields": ("name", "display_name", "description", "enabled")}),
        ("页面", {"fields": ("example_questions",)}),
        ("连接", {"fields": ("protocol", "base_url", "domain", "timeout_sec")}),
        ("审批", {"fields": ("approval_policy",)}),
        ("谁能用", {"fields": ("allowed_groups",)}),
        ("时间", {"fields": ("created_at", "updated_at"), "classes": ("collapse",)}),
    )

    def get_readonly_fields(self, request, obj=None):
        fields = super().get_readonly_fields(request, obj)
        if request.user.is_superuser:
            return fields
        # Left out of the form, so a POST that carries them anyway changes nothing.
        return (*fields, *SUPERUSER_ONLY_FIELDS)

    def has_add_permission(self, request) -> bool:
        # A new sub-agent needs a base URL, which only superusers may set.
        return request.user.is_superuser and super().has_add_permission(request)

    @admin.display(description="熔断状态")
    def circuit(self, obj: SubAgent) -> str:
        return circuit_status_text(circuit_status(source=subagent_circuit_key(obj)))  # the cache only, no request

    def save_model(self, request, obj: SubAgent, form, change: bool) -> None:
        super().save_model(request, obj, form, change)
        if not obj.agents.exists():  # saved is not offered: staff expect the model to see it now
            self.message_user(request, NOT_OFFERED_TEXT.format(name=obj.name), messages.WARNING)
        if obj.is_a2a and (not change or {"protocol", "base_url"} & set(form.changed_data)):
            self._card_message(request, obj, info=getattr(form, "card_info", None), saved=True)

    @admin.action(description="读取 Agent Card（A2A：名称、技能、是否流式）")
    def show_agent_card(self, request, queryset):
        for sub_agent in queryset.order_by("name"):
            if not sub_agent.is_a2a:
                self.message_user(request, CARD_NOT_A2A_TEXT.format(name=sub_agent.name), messages.INFO)
            else:
                self._card_message(request, sub_agent)

    def _card_message(self, request, sub_agent: SubAgent, *, info: AgentCardInfo | None = None,
                      saved: bool = False) -> None:
        """Reads the card (at most a few seconds, 256 KB) and shows it, or says why it cannot.
        Only on a POST: opening a page connects to nothing (docs/operations.md)."""
        try:
            info = info or _card_fetch(sub_agent.base_url)
        except AgentCardError as exc:
            text = CARD_SAVED_UNREAD_TEXT if saved else CARD_FAILED_TEXT
            self.message_user(request, text.format(name=sub_agent.name, reason=exc.message), messages.WARNING)
            return
        level = messages.WARNING if info.problem else messages.SUCCESS
        self.message_user(request, agent_card_html(sub_agent.name, info), level)

    @admin.action(description="健康检查（GET 服务地址/healthz，A2A 读取 Agent Card；正常则解除熔断）")
    def health_check(self, request, queryset):
        for sub_agent in queryset.order_by("name"):
            result = subagent_health_check(sub_agent=sub_agent)
            self.message_user(request, result.text, messages.SUCCESS if result.ok else messages.ERROR)
            if result.ok and circuit_close(source=subagent_circuit_key(sub_agent), name=f"sub-agent {sub_agent.name}"):
                self.message_user(request, CIRCUIT_CLOSED_TEXT.format(name=sub_agent.name), messages.INFO)
