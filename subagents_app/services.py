"""Writes to the sub-agent catalog: the seed import (upsert by name) and the export."""
from collections.abc import Sequence
from dataclasses import dataclass, field

from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.db import transaction

from subagents_app.models import SubAgent
from subagents_app.seed_format import FIELD_ORDER, SeedEntry, SeedError, entry_label, seed_dump, seed_parse

# The fields the seed file owns; everything else (id, timestamps) is left as it is.
SEED_FIELDS = FIELD_ORDER


@dataclass
class ImportPlan:
    """What an import does, computed in full (and validated) before anything is written."""

    to_create: list[SubAgent] = field(default_factory=list)
    to_update: list[tuple[SubAgent, list[str]]] = field(default_factory=list)  # row, changed fields
    unchanged: list[SubAgent] = field(default_factory=list)
    to_disable: list[SubAgent] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"新建 {len(self.to_create)} 个，更新 {len(self.to_update)} 个，"
            f"未变 {len(self.unchanged)} 个，停用 {len(self.to_disable)} 个"
        )

    def describe(self) -> list[str]:
        lines = [f"新建 {row.name}" for row in self.to_create]
        lines += [f"更新 {row.name}：{', '.join(fields)}" for row, fields in self.to_update]
        lines += [f"停用 {row.name}" for row in self.to_disable]
        return lines


def _validation_lines(entry: SeedEntry, exc: ValidationError) -> list[str]:
    label = entry_label(entry.index, entry.name)
    lines = []
    for field_name, messages in exc.message_dict.items():
        where = "条目" if field_name == NON_FIELD_ERRORS else field_name
        lines += [f"{label}: {where}: {message}" for message in messages]
    return lines


def _entry_plan(plan: ImportPlan, entry: SeedEntry, row: SubAgent | None) -> list[str]:
    """Adds one entry to the plan after SubAgent.full_clean(); returns its problems instead
    when the values break the model's rules (the same rules admin applies)."""
    is_new = row is None
    row = SubAgent() if is_new else row
    changed = [f for f in SEED_FIELDS if getattr(row, f) != getattr(entry, f)]
    for f in SEED_FIELDS:
        setattr(row, f, getattr(entry, f))
    try:
        row.full_clean()
    except ValidationError as exc:
        return _validation_lines(entry, exc)
    if is_new:
        plan.to_create.append(row)
    elif changed:
        plan.to_update.append((row, changed))
    else:
        plan.unchanged.append(row)
    return []


def subagent_import_plan(
    *, entries: list[SeedEntry], disable_missing: bool = False, problems: Sequence[tuple[int, str]] = ()
) -> ImportPlan:
    """Validates every entry and returns the plan, or raises SeedError listing each problem in
    file order (`problems` found while reading the file included). Reads only."""
    existing = {row.name: row for row in SubAgent.objects.all()}
    plan = ImportPlan()
    found = list(problems)
    for entry in entries:
        found += [(entry.index, line) for line in _entry_plan(plan, entry, existing.get(entry.name))]
    if found:
        raise SeedError([line for _, line in sorted(found, key=lambda item: item[0])])
    if disable_missing:
        named = {entry.name for entry in entries}
        plan.to_disable = [row for name, row in sorted(existing.items()) if name not in named and row.enabled]
    return plan


def subagent_import_apply(*, plan: ImportPlan) -> None:
    """Writes a plan in one transaction: all of it or nothing."""
    with transaction.atomic():
        for row in plan.to_create:
            row.save()
        for row, fields in plan.to_update:
            row.save(update_fields=[*fields, "updated_at"])
        for row in plan.to_disable:
            row.enabled = False
            row.save(update_fields=["enabled", "updated_at"])


def subagent_import(*, text: str, dry_run: bool = False, disable_missing: bool = False) -> ImportPlan:
    """Upserts the seed file's entries by name; with `dry_run` only plans. Raises SeedError
    naming every bad entry and field, having changed nothing."""
    entries, problems = seed_parse(text=text)
    # Plan and write in one transaction, so the plan is checked against the rows it changes.
    with transaction.atomic():
        plan = subagent_import_plan(entries=entries, disable_missing=disable_missing, problems=problems)
        if not dry_run:
            subagent_import_apply(plan=plan)
    return plan


def subagent_export() -> str:
    """The whole catalog in the seed format, ordered by name (stable, diff-friendly)."""
    rows = SubAgent.objects.order_by("name").values(*SEED_FIELDS)
    return seed_dump(rows=list(rows))
