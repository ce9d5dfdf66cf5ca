import os
import sys

from asgiref.sync import async_to_sync
from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import NON_FIELD_ERRORS, PermissionDenied, ValidationError
from django.http import Http404, HttpResponseRedirect
from django.urls import path, reverse

from agents_app.access import STAFF_VIEW
from agents_app.mcp.oauth import grant_revoke
from agents_app.models import Agent, AgentFallback, McpOAuthGrant, McpService, Provider
from campus_agent.base.admin_extensions import ExtensibleAdmin
from campus_agent.base.admin_history import CatalogHistoryAdmin
from campus_agent.base.admin_secrets import KEY_SET_TEXT, SecretKeyAdminMixin, SecretKeyForm, key_state
from campus_agent.base.approval import ApprovalPolicy
from campus_agent.base.circuit import circuit_close, circuit_status, circuit_status_text

TOOL_DESCRIPTION_PREVIEW = 80
# What a service runs (stdio: a program on this server) or where it connects and with which
# credentials (sse / streamable-http) is a superuser right: other staff see it read-only.
# `trusted` lets a service's images reach students' pages: the same trust as what it runs;
# `oauth_origins` where its OAuth flow may send requests and students.
MCP_SUPERUSER_ONLY_FIELDS = ("protocol", "config", "oauth_origins", "trusted")

LOCKED_FIELD_ERROR = "{field}有误，只有超级管理员可以修改，请联系超级管理员：{error}"

OFFERED_TOOLS_HINT = (
    "打开本页不会连接任何 MCP 服务。点击右上角“列出工具”查看模型将看到的工具"
    "（会连接所选的 MCP 服务，stdio 服务会在服务器上启动进程）。"
)
# The stdio command must be a Python that has `mcp` (a plain "python" is often the system's).
STDIO_PYTHON_HINT = "本服务器上装有 mcp 的 Python 是 {python}（stdio 服务的 command 写它；写 python 时运行的常常是没有 mcp 的系统 Python）。"
OFFERED_TOOLS_UNSAVED = "保存后可在本页点击“列出工具”查看。"
OFFERED_TOOLS_TEXT = "“{agent}”的模型将看到 {count} 个工具：{tools}"
OFFERED_TOOLS_NONE = "“{agent}”没有可用工具（未选择已启用的 MCP 服务或子 Agent）。"
ASKS_FIRST = "；运行前先经学生确认"
OFFERED_TOOLS_PROBLEM = "MCP 服务连接失败，本轮不会提供它的工具：{problem}"
CIRCUIT_CLOSED_TEXT = "“{name}”已连通，熔断已解除。"
TOOLS_DROPPED_TEXT = "“{name}” 有工具超过上限，没有提供给模型：{dropped}"
# As for a sub-agent (subagents_app.admin.NOT_OFFERED_TEXT): saved is not offered.
MCP_NOT_OFFERED_TEXT = (
    "还没有智能体使用 MCP 服务 “{name}”：到 智能体 → 打开一个智能体 → 在“MCP 服务”里勾选它并保存，模型才会看到并调用它的工具。"
)
# Where a provider's requests go and which server variable is sent as its key are superuser
# rights (another staff member could point a stored key, or the server's SECRET_KEY, elsewhere).
PROVIDER_SUPERUSER_ONLY_FIELDS = ("base_url", "api_key_env")
API_KEY_ENV_TEXT = "读取环境变量 {name}（{state}）"
PROBE_OK_TEXT = "“{name}”已连通，共 {count} 个模型：{models}"
PROBE_NONE_TEXT = "“{name}”已连通，但没有列出任何模型。"


def _preview(text: str) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= TOOL_DESCRIPTION_PREVIEW else flat[:TOOL_DESCRIPTION_PREVIEW] + "…"


class PostButtonMixin:
    """A change page's button that does something now — connects, lists, tests — as a POST to
    `<id>/<button_action>/` (URL name `<app>_<model>_<button_action>`), never a GET (a stdio
    service is a process started on this server; a provider test sends its key): a GET comes back
    to the change page having done nothing. The template is
    templates/admin/includes/post_button.html. It reports through messages (`button_report`) and
    comes back to the change page. (The admin's `Media` adds agents_app/admin.css, its look.)"""

    button_action: str

    def button_report(self, request, obj) -> None:
        raise NotImplementedError

    def button_permitted(self, request, obj) -> bool:
        return self.has_change_permission(request, obj)

    def get_urls(self):
        opts = self.opts
        own = [
            path(f"<path:object_id>/{self.button_action}/", self.admin_site.admin_view(self.button_view),
                 name=f"{opts.app_label}_{opts.model_name}_{self.button_action}"),
        ]
        return own + super().get_urls()  # before the change view's catch-all

    def button_view(self, request, object_id):
        opts = self.opts
        change_url = reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[object_id])
        if request.method != "POST":
            # Opened by address (a reload, a pasted link): the page with the button, not a blank 405.
            return HttpResponseRedirect(change_url)
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            raise Http404
        if not self.button_permitted(request, obj):
            raise PermissionDenied
        self.button_report(request, obj)
        return HttpResponseRedirect(change_url)


class ToolsButtonMixin(PostButtonMixin):
    """The "列出工具" button (templates/admin/includes/tools_button.html): `tools_report` says
    what it found; `tools_permitted` who may press it."""

    button_action = "tools"

    def tools_report(self, request, obj) -> None:
        raise NotImplementedError

    def tools_permitted(self, request, obj) -> bool:
        return self.has_change_permission(request, obj)

    def button_report(self, request, obj) -> None:
        self.tools_report(request, obj)

    def button_permitted(self, request, obj) -> bool:
        return self.tools_permitted(request, obj)


class AgentFallbackInline(admin.TabularInline):
    """The agent's fallback providers; staff order them by 顺序 (smallest first)."""

    model = AgentFallback
    fields = ("position", "provider", "model")
    extra = 0
    ordering = ("position", "id")


# chat_app/gateways/mcp_server.py describes the agent's MCP tool with the prompt's first sentence.
PROMPT_FIRST_SENTENCE_HELP = "第一句话也是 MCP 客户端看到的工具说明（最多 120 字，“你是……”说成“它是……”），请写成对这个智能体的介绍。"


class AgentForm(forms.ModelForm):
    class Meta:
        model = Agent
        fields = "__all__"
        widgets = {
            # monospace from static/css/admin.css: the admin's CSP refuses inline styles
            "system_prompt": forms.Textarea(attrs={"rows": 20, "cols": 100}),
        }
        help_texts = {"system_prompt": Agent._meta.get_field("system_prompt").help_text + PROMPT_FIRST_SENTENCE_HELP}


@admin.register(Agent)
class AgentAdmin(ExtensibleAdmin, ToolsButtonMixin, CatalogHistoryAdmin):
    form = AgentForm
    list_display = ("name", "slug", "provider", "effective_model", "is_default", "enabled", "max_tool_rounds",
                    "updated_at")
    list_select_related = ("provider",)
    list_filter = ("enabled", "is_default")
    search_fields = ("name", "slug", "system_prompt")
    prepopulated_fields = {"slug": ("name",)}
    filter_horizontal = ("mcp_services", "sub_agents", "knowledge_collections", "allowed_groups")
    readonly_fields = ("offered_tools", "created_at", "updated_at")
    actions = ("offered_tools_list",)
    inlines = (AgentFallbackInline,)

    class Media:
        css = {"all": ["agents_app/admin.css"]}  # the "列出工具" button (ToolsButtonMixin)
    fieldsets = (
        (None, {"fields": ("name", "slug", "enabled", "is_default")}),
        ("模型", {"fields": ("system_prompt", "provider", "model", "thinking", "temperature", "max_tool_rounds",
                           "accepts_images")}),
        ("工具", {"fields": ("mcp_services", "sub_agents", "knowledge_collections", "offered_tools")}),
        ("谁能用", {"fields": ("allowed_groups",)}),
        ("时间", {"fields": ("created_at", "updated_at"), "classes": ("collapse",)}),
    )

    @admin.display(description="模型")
    def effective_model(self, obj: Agent) -> str:
        return obj.effective_model

    @admin.display(description="模型将看到的工具")
    def offered_tools(self, obj: Agent) -> str:
        # Listing connects to the services, and a stdio service is a process started on this
        # server: opening a page must never do that, so the list is behind an explicit POST.
        return OFFERED_TOOLS_UNSAVED if obj.pk is None else OFFERED_TOOLS_HINT

    @admin.action(description="列出模型将看到的工具（会连接 MCP 服务）", permissions=["change"])
    def offered_tools_list(self, request, queryset) -> None:
        for agent in queryset:
            self._offered_tools_report(request, agent)

    def tools_report(self, request, agent: Agent) -> None:
        self._offered_tools_report(request, agent)

    def _offered_tools_report(self, request, agent: Agent) -> None:
        """Exactly what the next turn offers (the runtime's own naming); services that cannot
        be reached are reported with their reason instead of silently missing."""
        from agents_app.runtime.tools import tools_for_agent

        problems: list[str] = []  # every tool, whatever group each is limited to: staff's view
        tools = async_to_sync(tools_for_agent)(agent, audience=STAFF_VIEW, pooled=False, problems=problems)
        if tools:
            listed = "；".join(f"{t.name}（{_preview(t.description)}{ASKS_FIRST if t.approval == 'ask' else ''}）"
                              for t in tools)
            messages.success(request, OFFERED_TOOLS_TEXT.format(agent=agent.name, count=len(tools), tools=listed))
        elif not problems:
            messages.info(request, OFFERED_TOOLS_NONE.format(agent=agent.name))
        for problem in problems:
            messages.error(request, OFFERED_TOOLS_PROBLEM.format(problem=problem))


class McpServiceForm(forms.ModelForm):
    class Meta:
        model = McpService
        fields = "__all__"
        widgets = {
            "config": forms.Textarea(attrs={"rows": 8, "cols": 100}),
            "tool_approvals": forms.Textarea(attrs={"rows": 3, "cols": 100}),
            "oauth_origins": forms.Textarea(attrs={"rows": 2, "cols": 100}),
        }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "config" in self.fields:  # read-only for non-superusers
            self.fields["config"].help_text += STDIO_PYTHON_HINT.format(python=sys.executable)

    def add_error(self, field, error):
        # McpService.clean() checks the stored config even when this form leaves it out (read-only
        # for non-superusers): say so for the whole form instead of failing on a missing field.
        if field is None and isinstance(error, ValidationError) and hasattr(error, "error_dict"):
            errors = dict(error.error_dict)
            for name in [n for n in errors if n != NON_FIELD_ERRORS and n not in self.fields]:
                label = McpService._meta.get_field(name).verbose_name
                errors.setdefault(NON_FIELD_ERRORS, []).extend(
                    ValidationError(LOCKED_FIELD_ERROR.format(field=label, error=" ".join(e.messages)))
                    for e in errors.pop(name)
                )
            error = ValidationError(errors)
        super().add_error(field, error)


def _policy_label(service: McpService, info) -> str:
    policy = service.tool_approval(tool=info.name, read_only=info.read_only, destructive=info.destructive)
    return ApprovalPolicy(policy).label


@admin.register(McpService)
class McpServiceAdmin(ExtensibleAdmin, ToolsButtonMixin, CatalogHistoryAdmin):
    form = McpServiceForm
    # Header and env values may be credentials: the diff page says only that they changed.
    history_masked = {"config": ("headers", "env", "oauth")}
    list_display = (
        "name", "display_name", "protocol", "enabled", "trusted", "approval_default", "timeout_sec", "circuit", "updated_at",
    )
    list_filter = ("protocol", "enabled", "trusted", "approval_default")
    search_fields = ("name", "display_name")
    readonly_fields = ("created_at", "updated_at")
    filter_horizontal = ("allowed_groups",)
    actions = ("list_tools",)

    class Media:
        css = {"all": ["agents_app/admin.css"]}  # the "列出工具" button (ToolsButtonMixin)

    def tools_permitted(self, request, obj) -> bool:
        return self.has_view_permission(request, obj)  # reading a service's tools changes nothing

    def save_model(self, request, obj: McpService, form, change: bool) -> None:
        super().save_model(request, obj, form, change)
        if not obj.agents.exists():  # staff expect the model to see its tools now
            self.message_user(request, MCP_NOT_OFFERED_TEXT.format(name=obj.name), messages.WARNING)

    def tools_report(self, request, service: McpService) -> None:
        self._tools_report(request, service)

    def get_readonly_fields(self, request, obj=None):
        fields = super().get_readonly_fields(request, obj)
        if request.user.is_superuser:
            return fields
        # Left out of the form, so a POST that carries them anyway changes nothing.
        return (*fields, *MCP_SUPERUSER_ONLY_FIELDS)

    def has_add_permission(self, request) -> bool:
        # A new service needs a protocol and a config, which only superusers may set.
        return request.user.is_superuser and super().has_add_permission(request)

    @admin.display(description="熔断状态")
    def circuit(self, obj: McpService) -> str:
        from agents_app.mcp.tools import mcp_circuit_key

        return circuit_status_text(circuit_status(source=mcp_circuit_key(obj)))  # the cache only, no connection

    @admin.action(description="列出工具（测试连接；连通则解除熔断）")
    def list_tools(self, request, queryset) -> None:
        for service in queryset:
            self._tools_report(request, service)

    def _tools_report(self, request, service: McpService) -> None:
        from agents_app.mcp.pool import McpUnavailable
        from agents_app.mcp.tools import mcp_circuit_key, mcp_service_probe
        from agents_app.runtime.tool_names import mcp_tool_name

        try:
            infos = async_to_sync(mcp_service_probe)(service=service)
        except McpUnavailable as exc:
            messages.error(request, f"“{service.name}” 连接失败：{exc}")
            return
        names = "；".join(
            f"{mcp_tool_name(service=service.name, tool=i.name)}（{_preview(i.description)}；"
            f"审批：{_policy_label(service, i)}）"
            for i in infos
        )
        messages.success(request, f"“{service.name}” 共 {len(infos)} 个工具：{names or '（无）'}")
        if infos.dropped:
            messages.warning(request, TOOLS_DROPPED_TEXT.format(name=service.name, dropped="；".join(infos.dropped)))
        if circuit_close(source=mcp_circuit_key(service), name=f"MCP service {service.name}"):
            messages.info(request, CIRCUIT_CLOSED_TEXT.format(name=service.name))


def _api_key_state(provider: Provider) -> str:
    if provider.api_key_env:
        state = KEY_SET_TEXT if os.environ.get(provider.api_key_env) else "服务器上未设置该变量"
        return API_KEY_ENV_TEXT.format(name=provider.api_key_env, state=state)
    return key_state(provider)


class ProviderForm(SecretKeyForm):
    """The key is write-only (campus_agent.base.admin_secrets), or read from a server variable."""

    key_help = "当前：{state}。只写不读：已保存的密钥不会显示；留空则保持不变。加密后保存在数据库中。"
    key_new_help = "只写不读：保存后不再显示。加密后保存在数据库中；不在后台保存密钥时留空，填下面的“密钥环境变量”。"

    class Meta:
        model = Provider
        fields = ("name", "kind", "base_url", "api_key", "api_key_clear", "api_key_env", "default_model",
                  "timeout_sec", "accepts_images", "reasoning_back", "enabled")

    def key_state(self) -> str:
        return _api_key_state(self.instance)


@admin.register(Provider)
class ProviderAdmin(SecretKeyAdminMixin, PostButtonMixin, CatalogHistoryAdmin):
    """Model providers. 「测试连接」 (a POST, change permission: the button on the change page and
    the action on the list) lists each provider's models."""

    form = ProviderForm
    button_action = "test"
    actions = ("connection_test",)
    list_display = ("name", "kind", "base_url", "default_model", "api_key_status", "accepts_images", "enabled",
                    "updated_at")
    list_filter = ("kind", "enabled", "accepts_images")
    search_fields = ("name", "base_url", "default_model")
    readonly_fields = ("created_at", "updated_at")
    fieldsets = (
        (None, {"fields": ("name", "kind", "enabled")}),
        ("连接", {"fields": ("base_url", "api_key", "api_key_clear", "api_key_env", "timeout_sec")}),
        ("模型", {"fields": ("default_model", "accepts_images", "reasoning_back")}),
        ("时间", {"fields": ("created_at", "updated_at"), "classes": ("collapse",)}),
    )

    class Media:
        css = {"all": ["agents_app/admin.css"]}  # the 「测试连接」 button (PostButtonMixin)

    superuser_only_fields = PROVIDER_SUPERUSER_ONLY_FIELDS

    def key_state(self, obj: Provider) -> str:
        return _api_key_state(obj)

    def has_add_permission(self, request) -> bool:
        return request.user.is_superuser and super().has_add_permission(request)  # a new one needs a base URL

    @admin.action(description="测试连接（列出模型）", permissions=["change"])
    def connection_test(self, request, queryset) -> None:
        for provider in queryset.order_by("name"):
            self.button_report(request, provider)

    def button_report(self, request, provider: Provider) -> None:
        """GET the provider's /models with its key, within LLM_PROBE_TIMEOUT: what it lists, or why not."""
        from agents_app.runtime.providers import ProbeFailed, provider_llm, provider_models_probe

        try:
            models = async_to_sync(provider_models_probe)(provider=provider_llm(provider),
                                                          timeout=settings.LLM_PROBE_TIMEOUT)
        except ProbeFailed as exc:
            messages.error(request, str(exc))
            return
        if not models:
            messages.warning(request, PROBE_NONE_TEXT.format(name=provider.name))
            return
        messages.success(request, PROBE_OK_TEXT.format(name=provider.name, count=len(models), models="、".join(models)))


@admin.register(McpOAuthGrant)
class McpOAuthGrantAdmin(admin.ModelAdmin):
    """Which students connected their own account to which per-student MCP service (agents_app/
    mcp/oauth.py). Read-only: the tokens are never shown; deleting a row disconnects the account:
    its tokens are revoked at the authorization server where it has an RFC 7009 endpoint, and the
    next use asks the student to authorize again."""

    list_display = ("user", "service", "scope", "expires_at", "updated_at")
    list_filter = ("service",)
    search_fields = ("user__username", "service__name")
    readonly_fields = ("user", "service", "scope", "expires_at", "created_at", "updated_at")

    def has_add_permission(self, request) -> bool:
        return False  # only a student's own authorization makes one

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def delete_model(self, request, obj: McpOAuthGrant) -> None:
        grant_revoke(obj)  # at the authorization server too (RFC 7009), where it can
        super().delete_model(request, obj)

    def delete_queryset(self, request, queryset) -> None:
        for grant in queryset.select_related("service"):
            grant_revoke(grant)
        super().delete_queryset(request, queryset)
