from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from subagents_app.seed_format import SeedError
from subagents_app.services import subagent_import


class Command(BaseCommand):
    help = (
        "Upserts sub-agents by name from a seed YAML file (agents: [{name, description, base_url, "
        "domain, timeout_sec}]). A bad file names the entry and field and changes nothing."
    )

    def add_arguments(self, parser):
        parser.add_argument("file", type=Path, help="the seed YAML file")
        parser.add_argument("--dry-run", action="store_true", help="print what would change, change nothing")
        parser.add_argument(
            "--disable-missing", action="store_true", help="disable enabled sub-agents that the file does not list"
        )

    def handle(self, *args, file: Path, dry_run: bool, disable_missing: bool, **options):
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"cannot read {file}: {exc}") from exc
        try:
            plan = subagent_import(text=text, dry_run=dry_run, disable_missing=disable_missing)
        except SeedError as exc:
            raise CommandError(f"{file}: nothing was changed:\n" + "\n".join(exc.lines)) from exc
        prefix = "would " if dry_run else ""
        for line in plan.describe():
            self.stdout.write(prefix + line)
        if dry_run:
            self.stdout.write("dry run: nothing was changed")
        self.stdout.write(self.style.SUCCESS(plan.summary()))
