"""The sub-agent seed file: `agents: [{name, description, base_url, domain, timeout_sec}]`.

Reading checks the file's shape and each field's type (what YAML alone can get wrong); the
values themselves are checked by `SubAgent.full_clean()` in the import service, so admin and
import share one set of rules. `enabled` is an optional extra key: export writes
`enabled: false` for a disabled row so that a round trip keeps it disabled; absent means true.
`protocol` (`campus-sse` when absent) and `approval_policy` (`auto` when absent: docs/staff.md,
"Tools that ask first") are optional too; export writes each only when it is not the default, so a
catalog that uses neither exports as it did before they existed, and a round trip keeps them.
"""
from dataclasses import dataclass

import yaml

REQUIRED_FIELDS = ("name", "description", "base_url")
DEFAULT_PROTOCOL = "campus-sse"
OPTIONAL_FIELDS = {
    "domain": "", "timeout_sec": 30, "enabled": True, "protocol": DEFAULT_PROTOCOL, "approval_policy": "auto",
}
FIELD_ORDER = ("name", "description", "base_url", "domain", "timeout_sec", "enabled", "protocol", "approval_policy")
# Exported only when not their default (see the module docstring).
EXPORTED_WHEN_SET = ("enabled", "protocol", "approval_policy")
FIELD_TYPES = {
    "name": str,
    "description": str,
    "base_url": str,
    "domain": str,
    "timeout_sec": int,
    "enabled": bool,
    "protocol": str,
    "approval_policy": str,
}
_TYPE_WORDS = {str: "字符串", int: "整数", bool: "true 或 false"}


class SeedError(Exception):
    """A file that cannot be imported; `lines` name the entry and the field that is wrong."""

    def __init__(self, lines: list[str]):
        super().__init__("\n".join(lines))
        self.lines = lines


@dataclass(frozen=True, slots=True)
class SeedEntry:
    index: int  # 1-based position in the file, for error messages
    name: str
    description: str
    base_url: str
    domain: str
    timeout_sec: int
    enabled: bool
    protocol: str = DEFAULT_PROTOCOL
    approval_policy: str = "auto"


def entry_label(index: int, name) -> str:
    return f"第 {index} 条（{name if isinstance(name, str) and name else '?'}）"


def _type_ok(value, expected: type) -> bool:
    # bool is a subclass of int in Python: `timeout_sec: true` must not pass as 1.
    if expected is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, expected)


def _entry_errors(index: int, raw) -> list[str]:
    if not isinstance(raw, dict):
        return [f"{entry_label(index, None)}: 条目须是映射（name: …, description: …），而不是 {type(raw).__name__}"]
    label = entry_label(index, raw.get("name"))
    errors = []
    for key in raw:
        if key not in FIELD_TYPES:
            errors.append(f"{label}: {key}: 未知字段，可用字段：{', '.join(FIELD_ORDER)}")
    for field in REQUIRED_FIELDS:
        if field not in raw or raw[field] is None:
            errors.append(f"{label}: {field}: 缺少必填字段")
    for field, expected in FIELD_TYPES.items():
        value = raw.get(field)
        if value is not None and not _type_ok(value, expected):
            errors.append(f"{label}: {field}: 类型错误，应为{_TYPE_WORDS[expected]}，实际是 {value!r}")
    return errors


def _entry_build(index: int, raw: dict) -> SeedEntry:
    values = {**OPTIONAL_FIELDS, **{k: v for k, v in raw.items() if v is not None}}
    # Surrounding whitespace (a YAML block's final newline) is not content: strip it so that
    # a file and the database it was imported into compare equal.
    text = {f: values[f].strip() for f in ("name", "description", "base_url", "domain", "protocol", "approval_policy")}
    return SeedEntry(index=index, timeout_sec=values["timeout_sec"], enabled=values["enabled"], **text)


def seed_parse(*, text: str) -> tuple[list[SeedEntry], list[tuple[int, str]]]:
    """The well-formed entries of a seed file and the problems of the others, as
    (entry index, "第 N 条（name）: field: message") pairs. A file whose whole shape is wrong
    (YAML syntax, top level) raises SeedError: no entry can be read from it."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SeedError([f"YAML 语法错误：{exc}"]) from exc
    if not isinstance(data, dict) or not isinstance(data.get("agents"), list):
        raise SeedError(["顶层: 文件须是一个映射，含列表 agents：agents: [{name, description, base_url, …}]"])
    if set(data) != {"agents"}:
        extra = ", ".join(sorted(str(k) for k in set(data) - {"agents"}))
        raise SeedError([f"顶层: 未知的顶层键：{extra}（只允许 agents）"])
    errors: list[tuple[int, str]] = []
    entries: list[SeedEntry] = []
    seen: dict[str, int] = {}
    for index, raw in enumerate(data["agents"], start=1):
        problems = _entry_errors(index, raw)
        if problems:
            errors += [(index, line) for line in problems]
            continue
        entry = _entry_build(index, raw)
        if entry.name in seen:
            errors.append((index, f"{entry_label(index, entry.name)}: name: 与第 {seen[entry.name]} 条重名"))
            continue
        seen[entry.name] = index
        entries.append(entry)
    return entries, errors


class _SeedDumper(yaml.SafeDumper):
    pass


def _str_representer(dumper: yaml.SafeDumper, value: str):
    # Multi-line descriptions as `|` blocks: readable and diff-friendly in a seed file.
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_SeedDumper.add_representer(str, _str_representer)


def seed_dump(*, rows: list[dict]) -> str:
    """YAML text of the seed format; `rows` hold FIELD_ORDER keys. EXPORTED_WHEN_SET fields only
    when not their default."""
    agents = []
    for row in rows:
        item = {field: row[field] for field in FIELD_ORDER if field not in EXPORTED_WHEN_SET}
        for field in EXPORTED_WHEN_SET:
            if row.get(field, OPTIONAL_FIELDS[field]) != OPTIONAL_FIELDS[field]:
                item[field] = row[field]
        agents.append(item)
    return yaml.dump(
        {"agents": agents}, Dumper=_SeedDumper, allow_unicode=True, sort_keys=False, width=1000, indent=2
    )
