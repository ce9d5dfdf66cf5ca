"""The catalog's history (django-simple-history): a stored version against the live row, and a
rollback to it.

Each tracked model keeps every save as a row of its historical table (`<model>.history`), the
links of its tracked many-to-many fields in tables of their own. A rollback copies a version's
fields and links back onto the live row and saves it, so it is itself a new history entry
("回滚到 <date>") and goes through the model's post_save receivers like any admin save (the MCP
tool-list cache is dropped there: agents_app.signals).
"""
import difflib
import json
from dataclasses import dataclass, field

from django.core.exceptions import ValidationError
from django.db import models, transaction
from django.utils import timezone
from simple_history.utils import get_m2m_reverse_field_name

ROLLBACK_REASON = "回滚到 {date}"
HIDDEN_VALUE_TEXT = "已修改（值不显示）"
HIDDEN_PLACEHOLDER = "（值不显示）"
EMPTY_TEXT = "（空）"
DELETED_TEXT = "（已删除，id={pk}）"
# Never copied back: the key identifies the row, the timestamps are the save's own.
_NOT_RESTORED = {"created_at", "updated_at"}


@dataclass(frozen=True)
class FieldDiff:
    """One field that differs between a version and the live row, as staff read it."""

    name: str
    label: str  # the field's verbose_name
    old: str  # the version's value
    new: str  # the live value
    lines: list[tuple[str, str]] | None = None  # long texts: ("-" | "+" | " " | "@", line)
    hidden: list[str] = field(default_factory=list)  # "headers.X-Api-Key：已修改（值不显示）"
    locked: bool = False  # the staff member may not change it: a rollback keeps the live value


@dataclass(frozen=True)
class Restored:
    """The live row with a version's fields set (unsaved), and the version's links (ids that still exist)."""

    instance: models.Model
    links: dict[str, list[int]]
    missing: list[str]  # links to rows deleted since: "MCP 服务 id=3"


def history_fields(model: type[models.Model]) -> list[models.Field]:
    """The model's fields a version holds and a rollback restores (the m2m fields last)."""
    history = model.history.model
    plain = [f for f in history.tracked_fields if f.editable and not f.primary_key and f.name not in _NOT_RESTORED]
    m2m = [model._meta.get_field(f.name) for f in history._history_m2m_fields]
    return plain + m2m


def history_date_text(record) -> str:
    return timezone.localtime(record.history_date).strftime("%Y-%m-%d %H:%M:%S")


def _version_links(record, name: str) -> list[int]:
    model_field = record.instance_type._meta.get_field(name)
    target = get_m2m_reverse_field_name(model_field)
    return sorted(getattr(row, f"{target}_id") for row in getattr(record, name).all())


def _json_masked(value, keys: tuple[str, ...]):
    if not isinstance(value, dict):
        return value
    return {k: ({sub: HIDDEN_PLACEHOLDER for sub in v} if k in keys and isinstance(v, dict) else v)
            for k, v in value.items()}


def _hidden_changes(old, new, keys: tuple[str, ...]) -> list[str]:
    notes = []
    for key in keys:
        before = old.get(key) if isinstance(old, dict) else None
        after = new.get(key) if isinstance(new, dict) else None
        before, after = before if isinstance(before, dict) else {}, after if isinstance(after, dict) else {}
        notes += [f"{key}.{sub}：{HIDDEN_VALUE_TEXT}" for sub in sorted(set(before) | set(after))
                  if before.get(sub) != after.get(sub)]
    return notes


def _text(model_field: models.Field, value, *, masked: tuple[str, ...] = ()) -> str:
    if isinstance(model_field, models.ManyToManyField):
        names = {o.pk: str(o) for o in model_field.related_model.objects.filter(pk__in=value)}
        return "、".join(names.get(pk, DELETED_TEXT.format(pk=pk)) for pk in value) or EMPTY_TEXT
    if isinstance(model_field, models.ForeignKey):
        if value is None:
            return EMPTY_TEXT
        found = model_field.related_model.objects.filter(pk=value).first()
        return str(found) if found is not None else DELETED_TEXT.format(pk=value)
    if isinstance(model_field, models.JSONField):
        return json.dumps(_json_masked(value, masked), ensure_ascii=False, sort_keys=True, indent=1)
    if model_field.choices and (label := dict(model_field.flatchoices).get(value)) is not None:
        return str(label)
    if isinstance(value, bool):
        return "是" if value else "否"
    return EMPTY_TEXT if value in (None, "") else str(value)


def _lines(old: str, new: str) -> list[tuple[str, str]]:
    marks = []
    for line in difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=3):
        if line.startswith(("---", "+++")):
            continue
        marks.append(("@", "") if line.startswith("@@") else (line[0], line[1:]))  # "@": lines left out
    return marks


def history_diff(*, record, obj: models.Model, locked=(), masked: dict[str, tuple[str, ...]] | None = None) -> list[FieldDiff]:
    """The fields in which the version `record` differs from the live row `obj` (old = the
    version, new = the live value). Long texts come with a line diff; the sub-keys `masked`
    names (McpService.config's headers and env) are never shown, only that they changed."""
    masked = masked or {}
    diffs = []
    for model_field in history_fields(type(obj)):
        name = model_field.name
        if isinstance(model_field, models.ManyToManyField):
            old_value, new_value = _version_links(record, name), sorted(getattr(obj, name).values_list("pk", flat=True))
        else:
            old_value, new_value = getattr(record, model_field.attname), getattr(obj, model_field.attname)
        if old_value == new_value:
            continue
        keys = masked.get(name, ())
        old_text, new_text = _text(model_field, old_value, masked=keys), _text(model_field, new_value, masked=keys)
        long = isinstance(model_field, models.TextField) or "\n" in old_text or "\n" in new_text
        diffs.append(FieldDiff(
            name=name, label=str(model_field.verbose_name), old=old_text, new=new_text,
            lines=_lines(old_text, new_text) if long else None,
            hidden=_hidden_changes(old_value, new_value, keys) if keys else [],
            locked=name in locked,
        ))
    return diffs


def history_restored(*, record, obj: models.Model, fields: list[str]) -> Restored:
    """A copy of the live row with the version's `fields` set; nothing saved."""
    model = type(obj)
    instance = model.objects.get(pk=obj.pk)
    links, missing = {}, []
    for model_field in history_fields(model):
        if model_field.name not in fields:
            continue
        if isinstance(model_field, models.ManyToManyField):
            wanted = _version_links(record, model_field.name)
            existing = set(model_field.related_model.objects.filter(pk__in=wanted).values_list("pk", flat=True))
            links[model_field.name] = [pk for pk in wanted if pk in existing]
            missing += [f"{model_field.related_model._meta.verbose_name} id={pk}" for pk in wanted if pk not in existing]
        else:
            setattr(instance, model_field.attname, getattr(record, model_field.attname))
    return Restored(instance=instance, links=links, missing=missing)


def history_rollback(*, record, obj: models.Model, fields: list[str], user) -> Restored:
    """Saves the live row with the version's `fields` and links: one new history entry whose
    reason is "回滚到 <date>", by `user`. Validated like a form save first (ValidationError:
    nothing saved, e.g. the version's provider was deleted or another agent is the default now)."""
    restored = history_restored(record=record, obj=obj, fields=fields)
    instance = restored.instance
    instance.full_clean()
    with transaction.atomic():
        # The links first, without entries of their own: the save below records them with the fields.
        instance.skip_history_when_saving = True
        try:
            for name, pks in restored.links.items():
                getattr(instance, name).set(pks)
        finally:
            del instance.skip_history_when_saving
        instance._change_reason = ROLLBACK_REASON.format(date=history_date_text(record))
        instance._history_user = user
        instance.save()
    return restored


def history_rollback_error(exc: ValidationError) -> str:
    return " ".join(exc.messages)
