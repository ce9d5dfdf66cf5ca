"""The sections of the catalog file: what each holds and how it maps onto its model.

A section is one small class: its key in the file, its model, its natural key and its fields.
`SECTIONS` lists them in the order an import writes them, each after the sections it refers to.
A new kind of catalog object (say, LLM providers) is one more Section, one more entry in
SECTIONS before the sections that point to it, and a `Ref` / `Refs` field on those:

    class ProviderSection(Section):
        key, noun, model, natural_key = "providers", "模型服务", Provider, ("name",)
        fields = (Field("name", required=True), Field("base_url"), ...)

    SECTIONS = (ProviderSection(), McpServiceSection(), ...)
    # AgentSection.fields += Ref("provider", section="providers", noun="模型服务")

(`Refs` compares as a set, sorted by name: an ordered list such as fallbacks needs a variant that
keeps the order. A secret such as an API key needs a Field that resolves `${ENV:…}` like
McpConfig does, and exports a reference.)

Fields compare in "file space": a link is the linked object's natural key, a config is the
stored config with its references resolved. Text is stripped as admin's forms strip it.
"""
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.db import models

from agents_app.models import Agent, McpService
from insights_app.catalog.secrets import config_changes, config_for_file, config_resolve
from insights_app.forms import TOOL_NAME
from insights_app.models import ANY_TOOL, RoutingArgExpectation, RoutingCase
from knowledge_app.models import KnowledgeCollection
from subagents_app.models import SubAgent

_TYPE_WORDS = {str: "字符串", int: "整数", float: "数字", bool: "true 或 false", list: "列表", dict: "映射",
               type(None): "null（跟随默认）"}
PREVIEW = 40
GROUP_NAME_MAX = Group._meta.get_field("name").max_length
STDIO_WARNING = "警告：stdio MCP 服务 {name} 将在本服务器上运行 {command}（以服务器的用户身份）"


@dataclass
class Context:
    """What fields need while an import or export runs."""

    environ: Mapping[str, str] = field(default_factory=dict)  # the variables an import may read
    warnings: list[str] = field(default_factory=list)
    # section key -> natural keys the file names (also those with errors): a link to one of these
    # that is not in the database failed on its own entry.
    named: dict[str, set] = field(default_factory=dict)
    lookup: Callable[[str, object], models.Model | None] = lambda section, key: None


def _type_ok(value, expected: tuple[type, ...]) -> bool:
    if isinstance(value, bool):  # bool is an int in Python: `timeout_sec: true` is no 1
        return bool in expected
    if float in expected and isinstance(value, int):
        return True
    return isinstance(value, expected)


def _json_problem(value) -> str | None:
    """What no stored value may hold: a non-string key, a value JSON has no type for (YAML's
    dates, binary), a NUL (PostgreSQL refuses it), a float that is not finite."""
    if isinstance(value, str):
        return "文字里不能有 NUL 字符" if "\x00" in value else None
    if isinstance(value, float) and not math.isfinite(value):
        return f"数字须是有限值，实际是 {value!r}"
    if value is None or isinstance(value, bool | int | float):
        return None
    if isinstance(value, list):
        return next((p for item in value if (p := _json_problem(item))), None)
    if isinstance(value, dict):
        if not all(isinstance(key, str) for key in value):
            return "映射的键须是字符串"
        return next((p for item in [*value, *value.values()] if (p := _json_problem(item))), None)
    return f"不支持的值 {_short(value)}（{type(value).__name__}）"


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= PREVIEW else text[:PREVIEW] + "…"


@dataclass(frozen=True)
class Field:
    """A model field copied as it is (text stripped)."""

    name: str
    types: tuple[type, ...] = (str,)
    required: bool = False

    def default(self, model: type[models.Model]):
        return model._meta.get_field(self.name).get_default()

    def problems(self, value) -> list[str]:
        if not _type_ok(value, self.types):
            words = " 或 ".join(_TYPE_WORDS[t] for t in self.types)
            return [f"类型错误，应为{words}，实际是 {_short(value)}"]
        problem = _json_problem(value)
        return [problem] if problem else []

    def clean(self, value):
        if isinstance(value, str):
            return value.strip()
        if float in self.types and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        return value

    def current(self, row):
        return getattr(row, self.name)

    def wanted(self, value, ctx: Context, *, name: str, label: str) -> tuple[object, list[str]]:
        """The value to compare and store (references and links checked), and its problems."""
        return value, []

    def same(self, old, new) -> bool:
        return old == new

    def assign(self, row, value, ctx: Context) -> None:
        setattr(row, self.name, value)

    def child_problems(self, value) -> list[str]:
        return []

    def after_save(self, row, value, ctx: Context) -> None:
        pass

    def export(self, row, ctx: Context, *, label: str):
        return self.current(row)

    def changes(self, old, new, *, label: str) -> list[str]:
        if isinstance(old, str) and isinstance(new, str) and (len(old) > PREVIEW or "\n" in old + new):
            return [f"{self.name}: 已修改（{len(old)} 字 → {len(new)} 字）"]
        return [f"{self.name}: {_short(old)} → {_short(new)}"]


@dataclass(frozen=True)
class StrList(Field):
    """A JSON list of tool names (routing cases)."""

    types: tuple[type, ...] = (list,)
    allow_any: bool = False

    def default(self, model):
        return []

    def problems(self, value) -> list[str]:
        if errors := super().problems(value):
            return errors
        bad = [item for item in value if not isinstance(item, str)
               or not (TOOL_NAME.match(item) or (self.allow_any and item == ANY_TOOL))]
        if bad:
            return [f"工具名 {_short(bad[0])} 不对：应为小写字母、数字、“_”和“-”，如 call_canteen"
                    + ("；只写一个 * 表示不应调用任何工具" if self.allow_any else "")]
        if len(set(value)) != len(value):
            return ["同一个工具写了两次"]
        return []


@dataclass(frozen=True)
class History(Field):
    """A routing case's earlier turns: [{role: user | assistant, content: …}]."""

    types: tuple[type, ...] = (list,)

    def default(self, model):
        return []

    def problems(self, value) -> list[str]:
        if errors := super().problems(value):
            return errors
        for number, message in enumerate(value, start=1):
            if (not isinstance(message, dict) or set(message) != {"role", "content"}
                    or message["role"] not in ("user", "assistant") or not isinstance(message["content"], str)):
                return [f"第 {number} 条须是 {{role: user 或 assistant, content: 文字}}"]
        return []

    def clean(self, value):
        return [{"role": m["role"], "content": m["content"].strip()} for m in value]


@dataclass(frozen=True)
class McpConfig(Field):
    """An MCP service's config: secrets as `${ENV:NAME}` in the file (catalog/secrets.py)."""

    types: tuple[type, ...] = (dict,)

    def clean(self, value):
        return value

    def wanted(self, value, ctx, *, name, label):
        resolved, problems, warnings = config_resolve(value, service=name, environ=ctx.environ)
        ctx.warnings += [f"警告：{label}: {line}" for line in warnings]
        return resolved, problems

    def export(self, row, ctx, *, label):
        return config_for_file(service=row.name, config=row.config,
                               warn=lambda text: ctx.warnings.append(f"{label}: config.{text}；导入前请设置该环境变量"))

    def changes(self, old, new, *, label):
        return config_changes(old, new, service=label)


@dataclass(frozen=True)
class Ref(Field):
    """A foreign key, written as the natural key of the row it points to (in `section`)."""

    section: str = ""
    noun: str = ""

    def default(self, model):
        return None

    def current(self, row):
        target = getattr(row, self.name, None) if getattr(row, f"{self.name}_id") is not None else None
        return SECTION_BY_KEY[self.section].key_of_row(target)[0] if target is not None else None

    def _missing(self, key, ctx) -> str | None:
        if key is None or ctx.lookup(self.section, key) is not None:
            return None
        if key in ctx.named.get(self.section, set()):
            return f"{self.noun}“{key}”在文件里有错（见它自己的条目），无法关联"
        return f"{self.noun}“{key}”既不在文件里，也不在数据库里"

    def wanted(self, value, ctx, *, name, label):
        problem = self._missing(value, ctx)
        return value, [problem] if problem else []

    def assign(self, row, value, ctx):
        setattr(row, self.name, ctx.lookup(self.section, value) if value is not None else None)


@dataclass(frozen=True)
class Refs(Ref):
    """A many-to-many link, written as a list of natural keys; import sets it to the list."""

    types: tuple[type, ...] = (list,)

    def default(self, model):
        return []

    def problems(self, value) -> list[str]:
        if errors := super().problems(value):
            return errors
        if not all(isinstance(item, str) for item in value):
            return ["须是名称的列表"]
        if len(set(value)) != len(value):
            return ["同一个名称写了两次"]
        return []

    def clean(self, value):
        return sorted(item.strip() for item in value)

    def current(self, row):
        if row.pk is None:
            return []
        return sorted(SECTION_BY_KEY[self.section].key_of_row(t)[0] for t in getattr(row, self.name).all())

    def wanted(self, value, ctx, *, name, label):
        return value, [problem for key in value if (problem := self._missing(key, ctx))]

    def assign(self, row, value, ctx):
        pass

    def after_save(self, row, value, ctx):
        getattr(row, self.name).set([ctx.lookup(self.section, key) for key in value])

    def changes(self, old, new, *, label):
        return [f"{self.name}: [{', '.join(old)}] → [{', '.join(new)}]"]


@dataclass(frozen=True)
class GroupRefs(Refs):
    """`allowed_groups` (who sees what, agents_app.access): the groups' names. Groups are the
    campus's, not the catalog's (no section): a name this instance lacks is created, empty, and
    said — the login mapping or staff fill it — so the item stays limited, never open to all."""

    noun: str = "用户组"

    def problems(self, value) -> list[str]:
        if errors := super().problems(value):
            return errors
        too_long = [name for name in value if len(name.strip()) > GROUP_NAME_MAX or not name.strip()]
        return [f"用户组名须是 1–{GROUP_NAME_MAX} 个字符：{_short(too_long[0])}"] if too_long else []

    def current(self, row):
        return sorted(group.name for group in row.allowed_groups.all()) if row.pk is not None else []

    def wanted(self, value, ctx, *, name, label):
        present = set(Group.objects.filter(name__in=value).values_list("name", flat=True))
        ctx.warnings += [f"警告：{label}: 用户组“{group}”不存在，将新建（空组，请在后台或登录映射里加入成员）"
                         for group in value if group not in present]
        return value, []

    def after_save(self, row, value, ctx):
        row.allowed_groups.set([Group.objects.get_or_create(name=group)[0] for group in value])


GROUPS = GroupRefs("allowed_groups")
ARG_KEYS = ("tool", "argument", "contains")


@dataclass(frozen=True)
class ArgExpectations(Field):
    """A routing case's argument checks: [{tool, argument, contains}], replaced as a whole."""

    types: tuple[type, ...] = (list,)

    def default(self, model):
        return []

    def problems(self, value) -> list[str]:
        if errors := super().problems(value):
            return errors
        for number, item in enumerate(value, start=1):
            if not isinstance(item, dict) or not {"tool", "contains"} <= set(item) <= set(ARG_KEYS) or not all(
                isinstance(v, str) for v in item.values()
            ):
                return [f"第 {number} 条须是 {{tool: 工具名, argument: 参数名（默认 message）, contains: 文字}}"]
        return []

    def clean(self, value):
        return [{"tool": item["tool"].strip(), "argument": item.get("argument", "message").strip(),
                 "contains": item["contains"].strip()} for item in value]

    def current(self, row):
        if row.pk is None:
            return []
        return [{k: getattr(e, k) for k in ARG_KEYS} for e in row.arg_expectations.order_by("id")]

    def assign(self, row, value, ctx):
        pass

    def child_problems(self, value) -> list[str]:
        problems = []
        for number, item in enumerate(value, start=1):
            try:
                RoutingArgExpectation(**item).full_clean(exclude=["case"])
            except ValidationError as exc:
                problems += [f"第 {number} 条: {name}: {m}" for name, ms in exc.message_dict.items() for m in ms]
        return problems

    def after_save(self, row, value, ctx):
        row.arg_expectations.all().delete()
        RoutingArgExpectation.objects.bulk_create(RoutingArgExpectation(case=row, **item) for item in value)

    def changes(self, old, new, *, label):
        def text(items):
            return "、".join(f"{i['tool']}.{i['argument']} ⊇ {i['contains']}" for i in items) or "无"

        return [f"{self.name}: {text(old)} → {text(new)}"]


class Section:
    key: str
    noun: str  # how error lines and the report name one object
    model: type[models.Model]
    fields: tuple[Field, ...]
    natural_key: tuple[str, ...]

    def rows(self):
        return self.model.objects.order_by(*self.natural_key)

    def key_of_row(self, row) -> tuple:
        return tuple(getattr(row, name) for name in self.natural_key)

    def key_of(self, values: dict) -> tuple:
        return tuple(values[name] for name in self.natural_key)

    def describe(self, key: tuple) -> str:
        return " · ".join(_short(part).strip("'") if not isinstance(part, str) else part for part in key)

    def existing(self) -> dict[tuple, models.Model]:
        found: dict[tuple, models.Model] = {}
        for row in self.rows():
            found.setdefault(self.key_of_row(row), row)
        return found

    def write_order(self, entries: list) -> list:
        return entries

    def outbound(self, values: dict) -> list[tuple[str, str]]:
        """(field, address) of each place the entry makes the server connect to, as the file has it."""
        return []

    def written_warnings(self, row, values: dict) -> list[str]:
        """Lines to warn of when an import creates or changes `row` (dry run included)."""
        return []

    def exported_warnings(self, row) -> list[str]:
        """Lines to warn of when `row` is exported."""
        return []


class McpServiceSection(Section):
    key = "mcp_services"
    noun = "MCP 服务"
    model = McpService
    natural_key = ("name",)
    fields = (
        Field("name", required=True),
        Field("display_name"),
        Field("protocol"),
        McpConfig("config"),
        Field("oauth_origins", (list,)),
        Field("trusted", (bool,)),
        Field("enabled", (bool,)),
        Field("timeout_sec", (int,)),
        Field("approval_default"),
        Field("tool_approvals", (dict,)),
        GROUPS,
    )

    def outbound(self, values):
        config = values["config"] if isinstance(values["config"], dict) else {}
        oauth = config.get("oauth") if isinstance(config.get("oauth"), dict) else {}
        found = [("config.url", config.get("url")), ("config.oauth.issuer", oauth.get("issuer"))]
        return [(path, url) for path, url in found if isinstance(url, str) and url]

    def written_warnings(self, row, values):
        # import_catalog is an operator's command and refuses no stdio service; it says what
        # this server will run, as the file has it (no reference resolves in command or args).
        if row.protocol != McpService.Protocol.STDIO:
            return []
        config = values["config"]
        command = " ".join([str(config.get("command", "")), *map(str, config.get("args", []))])
        return [STDIO_WARNING.format(name=row.name, command=command)]


class SubAgentSection(Section):
    # The seed format's fields (subagents_app/seed_format.py) plus what students see (display
    # name, example questions): moving a catalog keeps the welcome page too.
    key = "sub_agents"
    noun = "子 Agent"
    model = SubAgent
    natural_key = ("name",)
    fields = (
        Field("name", required=True),
        Field("description", required=True),
        Field("base_url", required=True),
        Field("domain"),
        Field("timeout_sec", (int,)),
        Field("enabled", (bool,)),
        Field("protocol"),
        Field("approval_policy"),
        Field("display_name"),
        Field("example_questions"),
        GROUPS,
    )

    def outbound(self, values):
        return [("base_url", values["base_url"])]


class KnowledgeCollectionSection(Section):
    # The collection's definition; its documents are files, moved with `knowledge_import`.
    key = "knowledge_collections"
    noun = "知识库"
    model = KnowledgeCollection
    natural_key = ("slug",)
    fields = (
        Field("slug", required=True),
        Field("name", required=True),
        Field("description", required=True),
        Field("enabled", (bool,)),
        Field("synonyms"),
        GROUPS,
    )

    def exported_warnings(self, row):
        if not row.documents.exists():
            return []
        return [f"知识库 {row.slug} 的文件不在目录文件里：请在目标实例用 manage.py knowledge_import 导入"]


class AgentSection(Section):
    key = "agents"
    noun = "智能体"
    model = Agent
    natural_key = ("slug",)
    fields = (
        Field("slug", required=True),
        Field("name", required=True),
        Field("system_prompt"),
        Field("model"),
        Field("thinking"),
        Field("temperature", (float,)),
        Field("max_tool_rounds", (int,)),
        Field("accepts_images", (bool, type(None))),  # null: as its model provider says
        Field("enabled", (bool,)),
        Field("is_default", (bool,)),
        Refs("mcp_services", section="mcp_services", noun="MCP 服务"),
        Refs("sub_agents", section="sub_agents", noun="子 Agent"),
        Refs("knowledge_collections", section="knowledge_collections", noun="知识库"),
        GROUPS,
    )

    def exported_warnings(self, row):
        # Model providers are not a section yet: say what the file leaves out (import leaves an
        # existing agent's provider and fallbacks as they are; a new agent uses the default).
        if row.provider_id is None and not row.fallbacks.exists():
            return []
        return [f"智能体 {row.slug} 的模型提供方和备用提供方不在目录文件里（尚不支持导出），请在目标实例的后台设置"]

    def write_order(self, entries):
        # The default agent last: an agent giving the default up is saved before the one taking
        # it, so the single-default rule (Agent.clean) sees the file's state, not a half of it.
        return sorted(entries, key=lambda entry: entry[1].get("is_default") is True)


class RoutingCaseSection(Section):
    key = "routing_cases"
    noun = "路由用例"
    model = RoutingCase
    natural_key = ("agent", "question")  # as load_demo_cases matches them
    fields = (
        Ref("agent", required=True, section="agents", noun="智能体"),
        Field("question", required=True),
        History("history"),
        StrList("must_call"),
        StrList("must_not_call", allow_any=True),
        ArgExpectations("arg_expectations"),
        Field("notes"),
        Field("enabled", (bool,)),
    )

    def rows(self):
        return RoutingCase.objects.select_related("agent").order_by("agent__slug", "id")

    def key_of_row(self, row) -> tuple:
        return (row.agent.slug, row.question)

    def describe(self, key):
        agent, question = key
        flat = " ".join(str(question).split())
        return f"{agent} · {flat if len(flat) <= 30 else flat[:30] + '…'}"


SECTIONS: tuple[Section, ...] = (McpServiceSection(), SubAgentSection(), KnowledgeCollectionSection(), AgentSection(),
                                 RoutingCaseSection())
SECTION_BY_KEY = {section.key: section for section in SECTIONS}
