from pathlib import Path

from django.core.management.base import BaseCommand

from subagents_app.services import subagent_export


class Command(BaseCommand):
    help = "Writes every sub-agent in the seed YAML format, ordered by name, to FILE or stdout."

    def add_arguments(self, parser):
        parser.add_argument("file", nargs="?", type=Path, help="output file (default: stdout)")

    def handle(self, *args, file: Path | None, **options):
        text = subagent_export()
        if file is None:
            self.stdout.write(text, ending="")
            return
        file.write_text(text, encoding="utf-8")
        self.stdout.write(f"wrote {file}")
