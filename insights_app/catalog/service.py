"""Export and import of the whole catalog (agents, MCP services, sub-agents, routing cases).

Import, in one transaction:
1. Read the file (catalog_yaml_load: size cap, no aliases). Every `${ENV:NAME}` it holds, wherever
   it is, must be a variable staff allow (secrets.env_read_refusals): if one is not, raise
   CatalogError naming each, before the database is touched. Only the variables the file names
   are read, once, here. Then check its shape: `catalog: 1`, known sections, each entry a mapping
   of known fields of the right types, no natural key twice.
2. Section by section (SECTIONS: each after those it refers to), entry by entry: find the row by
   its natural key or start a new one, resolve `${ENV:…}` references and links, compare field by
   field, apply the file's values and `full_clean()` the row (admin's rules); save it only when
   something differs, each save in its own savepoint. Later entries see earlier ones, so a link
   to an object created by this file works and the single-default rule sees the file's state.
3. Any problem anywhere: roll everything back and raise CatalogError with every problem and
   where it is. A dry run rolls back too, having computed the same report.
Nothing is ever deleted: objects the file does not name are left as they are.
"""
import os
from dataclasses import dataclass, field

from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.db import DatabaseError, transaction

from insights_app.catalog.fileformat import CatalogError, catalog_yaml_dump, catalog_yaml_load
from insights_app.catalog.secrets import env_read_refusals, references_in
from insights_app.catalog.sections import SECTION_BY_KEY, SECTIONS, Context, Section

CATALOG_VERSION = 1
VERSION_KEY = "catalog"
NOTHING_TO_CHANGE = "没有需要修改的内容"
NEVER_DELETES = "导入从不删除：文件里没有的对象保持原样"
OUTBOUND_HEADING = "文件让服务器连接的地址（按文件原样，引用未展开）："
ENV_HEADING = "文件读取的环境变量："
NOTHING_READ = "  （无）"


class _Rollback(Exception):
    pass


@dataclass
class ObjectChange:
    noun: str
    name: str
    lines: list[str] = field(default_factory=list)  # changed fields (updates only)


@dataclass
class ImportReport:
    created: list[ObjectChange] = field(default_factory=list)
    updated: list[ObjectChange] = field(default_factory=list)
    unchanged: list[ObjectChange] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # What a dry run shows before staff import a file someone else wrote: every address the file
    # makes the server connect to, and every variable it reads.
    outbound: list[str] = field(default_factory=list)
    env_reads: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.created or self.updated)

    def describe(self, *, dry_run: bool = False) -> list[str]:
        will = "将" if dry_run else ""
        lines = [f"{will}新建 {c.noun} {c.name}" for c in self.created]
        for change in self.updated:
            lines.append(f"{will}更新 {change.noun} {change.name}：")
            lines += [f"  {line}" for line in change.lines]
        lines += [f"未变 {c.noun} {c.name}" for c in self.unchanged]
        if dry_run:
            lines += [OUTBOUND_HEADING, *(self.outbound or [NOTHING_READ])]
            lines += [ENV_HEADING, *(self.env_reads or [NOTHING_READ])]
        return lines

    def summary(self) -> str:
        if not self.changed:
            return f"{NOTHING_TO_CHANGE}（{len(self.unchanged)} 个对象均未变）"
        return (f"新建 {len(self.created)} 个，更新 {len(self.updated)} 个，未变 {len(self.unchanged)} 个"
                f"（{NEVER_DELETES}）")


@dataclass
class CatalogExport:
    text: str
    warnings: list[str]


def _label(section: Section, index: int, key) -> str:
    return f"{section.key} 第 {index} 条（{key}）"


def _raw_name(section: Section, raw: dict) -> str:
    parts = tuple(raw.get(name) for name in section.natural_key)
    if all(isinstance(part, str) and part for part in parts):
        return section.describe(parts)
    return parts[0] if isinstance(parts[0], str) and parts[0] else "?"


# A problem is (section's place in SECTIONS, entry index, line): the report lists them in file
# order, whichever step found them. The top level comes first.
Problem = tuple[int, int, str]


def _entry_read(section: Section, index: int, raw) -> tuple[dict | None, list[str]]:
    """The entry's values (defaults filled in, text stripped), or its problems."""
    if not isinstance(raw, dict):
        return None, [f"{_label(section, index, '?')}: 条目须是映射，而不是 {type(raw).__name__}"]
    names = [f.name for f in section.fields]
    label = _label(section, index, _raw_name(section, raw))
    problems = [f"{label}: {key}: 未知字段，可用字段：{', '.join(names)}" for key in raw if key not in names]
    values = {}
    for f in section.fields:
        if raw.get(f.name) is None:
            if f.required:
                problems.append(f"{label}: {f.name}: 缺少必填字段")
            values[f.name] = f.default(section.model)
        elif errors := f.problems(raw[f.name]):
            problems += [f"{label}: {f.name}: {error}" for error in errors]
        else:
            values[f.name] = f.clean(raw[f.name])
    for name in section.natural_key:
        if not problems and values[name] in ("", None):
            problems.append(f"{label}: {name}: 不能为空")
    return (None if problems else values), problems


def _catalog_read(data) -> tuple[dict[str, list[tuple[int, dict]]], dict[str, set], list[Problem]]:
    """Entries per section as (index, values), the natural keys each section names, problems."""
    if not isinstance(data, dict):
        raise CatalogError([f"顶层: 文件须是一个映射：{VERSION_KEY}: {CATALOG_VERSION}，以及 "
                            + "、".join(s.key for s in SECTIONS) + " 列表"])
    problems: list[Problem] = []
    if type(data.get(VERSION_KEY)) is not int or data[VERSION_KEY] != CATALOG_VERSION:  # not true, not 1.0
        problems.append((-1, 0, f"顶层: {VERSION_KEY}: 须是 {CATALOG_VERSION}（文件格式版本），"
                                f"实际是 {data.get(VERSION_KEY)!r}"))
    if unknown := sorted(str(k) for k in data if k != VERSION_KEY and k not in SECTION_BY_KEY):
        problems.append((-1, 0, f"顶层: 未知的顶层键：{', '.join(unknown)}（可用：{VERSION_KEY}、"
                         + "、".join(s.key for s in SECTIONS) + "）"))
    entries: dict[str, list[tuple[int, dict]]] = {}
    named: dict[str, set] = {}
    for place, section in enumerate(SECTIONS):
        raw_list = data.get(section.key)
        entries[section.key], named[section.key] = [], set()
        if raw_list is None:
            continue
        if not isinstance(raw_list, list):
            problems.append((-1, 0, f"顶层: {section.key}: 须是列表，而不是 {type(raw_list).__name__}"))
            continue
        seen: dict[tuple, int] = {}
        for index, raw in enumerate(raw_list, start=1):
            if isinstance(raw, dict) and len(section.natural_key) == 1:
                named[section.key].add(raw.get(section.natural_key[0]))
            values, errors = _entry_read(section, index, raw)
            problems += [(place, index, line) for line in errors]
            if values is None:
                continue
            key = section.key_of(values)
            if key in seen:
                problems.append((place, index, f"{_label(section, index, section.describe(key))}: "
                                 f"{'/'.join(section.natural_key)}: 与第 {seen[key]} 条重复"))
                continue
            seen[key] = index
            if len(section.natural_key) == 1:
                named[section.key].add(key[0])
            entries[section.key].append((index, values))
    return entries, named, problems


def _env_reads(data) -> list[tuple[str, str]]:
    """(where, variable name) of every reference in the file's sections, valid entries or not."""
    reads = []
    for section in SECTIONS:
        raw_list = data.get(section.key) if isinstance(data, dict) else None
        for index, raw in enumerate(raw_list if isinstance(raw_list, list) else [], start=1):
            label = _label(section, index, _raw_name(section, raw) if isinstance(raw, dict) else "?")
            reads += [(f"{label}: {path}", name) for path, name in references_in(raw, "")]
    return reads


def _outbound(entries: dict[str, list[tuple[int, dict]]]) -> list[str]:
    return [f"  {section.noun} {section.describe(section.key_of(values))}: {path} {url}"
            for section in SECTIONS for _, values in entries[section.key]
            for path, url in section.outbound(values)]


def _validation_lines(label: str, exc: ValidationError) -> list[str]:
    if not hasattr(exc, "error_dict"):
        return [f"{label}: 条目: {message}" for message in exc.messages]
    return [f"{label}: {'条目' if name == NON_FIELD_ERRORS else name}: {message}"
            for name, messages in exc.message_dict.items() for message in messages]


def _entry_apply(section: Section, index: int, values: dict, existing: dict, ctx: Context,
                 report: ImportReport) -> list[str]:
    key = section.key_of(values)
    name = section.describe(key)
    label = _label(section, index, name)
    row = existing.get(key)
    created = row is None
    if created:
        row = section.model()
    wanted, problems = {}, []
    for f in section.fields:
        wanted[f.name], errors = f.wanted(values[f.name], ctx, name=name, label=label)
        problems += [f"{label}: {error}" if error.startswith(f.name) else f"{label}: {f.name}: {error}"
                     for error in errors]
        problems += [f"{label}: {f.name}: {error}" for error in f.child_problems(wanted[f.name])]
    if problems:
        return problems
    changed = [f for f in section.fields if not created and not f.same(f.current(row), wanted[f.name])]
    lines = [line for f in changed for line in f.changes(f.current(row), wanted[f.name], label=name)]
    for f in section.fields:
        f.assign(row, wanted[f.name], ctx)
    try:
        row.full_clean()
    except ValidationError as exc:
        return _validation_lines(label, exc)
    if created or changed:
        try:
            with transaction.atomic():
                row.save()
                for f in section.fields:
                    if created or f in changed:
                        f.after_save(row, wanted[f.name], ctx)
        except (DatabaseError, ValidationError) as exc:
            return [f"{label}: 条目: 无法保存：{exc}"]
        existing[key] = row
    change = ObjectChange(noun=section.noun, name=name, lines=lines)
    (report.created if created else report.updated if changed else report.unchanged).append(change)
    if created or changed:
        report.warnings += section.written_warnings(row, values)
    return []


def catalog_import(*, text: str, dry_run: bool = False, environ=None) -> ImportReport:
    """Creates and updates the file's objects by natural key (see the module docstring); with
    `dry_run` only reports. Raises CatalogError naming every problem, having changed nothing.
    `environ` (default os.environ) resolves the file's `${ENV:NAME}` references."""
    data = catalog_yaml_load(text)
    reads = _env_reads(data)
    if refusals := env_read_refusals(reads):
        raise CatalogError(refusals)
    environ = os.environ if environ is None else environ
    readable = {name: environ[name] for _, name in reads if name in environ}
    entries, named, problems = _catalog_read(data)
    report = ImportReport(outbound=_outbound(entries), env_reads=[f"  {name} ← {where}" for where, name in reads])
    existing: dict[str, dict] = {}

    def lookup(section_key: str, natural_key):
        return existing[section_key].get((natural_key,))

    ctx = Context(environ=readable, warnings=report.warnings, named=named, lookup=lookup)
    try:
        with transaction.atomic():
            for place, section in enumerate(SECTIONS):
                existing[section.key] = section.existing()
                for index, values in section.write_order(entries[section.key]):
                    lines = _entry_apply(section, index, values, existing[section.key], ctx, report)
                    problems += [(place, index, line) for line in lines]
            if problems or dry_run:
                raise _Rollback
    except _Rollback:
        if problems:
            raise CatalogError([line for *_, line in sorted(problems, key=lambda p: p[:2])]) from None
    return report


def catalog_export() -> CatalogExport:
    """The whole catalog as catalog YAML, each section ordered by natural key; secret-looking
    config values become `${ENV:…}` references, each one told in `warnings`."""
    ctx = Context()
    data: dict = {VERSION_KEY: CATALOG_VERSION}
    for section in SECTIONS:
        data[section.key], seen = [], set()
        for row in section.rows():
            key = section.key_of_row(row)
            label = f"{section.noun} {section.describe(key)}"
            if key in seen:  # possible where the natural key is no unique constraint (routing cases)
                ctx.warnings.append(f"{label} 出现了不止一次：导入时会因重复被拒绝，请在后台合并或改写问题")
            seen.add(key)
            ctx.warnings += section.exported_warnings(row)
            data[section.key].append({f.name: f.export(row, ctx, label=label) for f in section.fields})
    return CatalogExport(text=catalog_yaml_dump(data), warnings=ctx.warnings)
