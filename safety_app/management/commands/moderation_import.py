"""`manage.py moderation_import FILE --list NAME --category … --action block|mask [--stages …]`:
one word a line, added to the list (made when missing); words already in it are skipped (docs/staff.md)."""

import time
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from safety_app.matcher import word_key
from safety_app.models import STAGES, ListWord, WordList

WORD_MAX = ListWord._meta.get_field("word").max_length
BATCH = 5000


class Command(BaseCommand):
    help = "把词表文件（每行一个词）导入敏感词表。"

    def add_arguments(self, parser):
        parser.add_argument("file", type=Path)
        parser.add_argument("--list", required=True, dest="list_name")
        parser.add_argument("--category", required=True)
        parser.add_argument("--action", required=True, choices=WordList.Action.values)
        parser.add_argument("--stages", default=",".join(STAGES), help=f"comma-separated, of {', '.join(STAGES)}")

    def handle(self, *args, file: Path, list_name: str, category: str, action: str, stages: str, **options):
        wanted = [stage.strip() for stage in stages.split(",") if stage.strip()]
        if not wanted or set(wanted) - set(STAGES):
            raise CommandError(f"--stages: choose from {', '.join(STAGES)}")
        try:
            lines = file.read_text(encoding="utf-8-sig").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"{file}: {exc}") from exc
        words = list(dict.fromkeys(line.strip() for line in lines if line.strip()))
        if too_long := [word for word in words if len(word) > WORD_MAX]:
            raise CommandError(f"{len(too_long)} words longer than {WORD_MAX} characters, e.g. {too_long[0][:20]}…")
        if empty := [word for word in words if not word_key(word)]:
            raise CommandError(
                f"{len(empty)} words are only spaces or punctuation, e.g. {empty[0]!r}: they match nothing"
            )
        started = time.perf_counter()
        with transaction.atomic():
            word_list, _ = WordList.objects.update_or_create(
                name=list_name,
                defaults={"category": category, "action": action, **{stage: stage in wanted for stage in STAGES}},
            )
            known = set(word_list.words.values_list("word", flat=True))
            new = [ListWord(word_list=word_list, word=word) for word in words if word not in known]
            ListWord.objects.bulk_create(new, batch_size=BATCH)
        self.stdout.write(
            f"{list_name}: {len(new)} words added, {len(words) - len(new)} already there "
            f"({time.perf_counter() - started:.2f} s)"
        )
