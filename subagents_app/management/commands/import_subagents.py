from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from subagents_app.seed_format import SeedError
from subagents_app.services import subagent_import


class Command(BaseCommand):
    help = (
        "按名称从种子 YAML 文件（agents: [{name, description, base_url, domain, timeout_sec}]）新建或更新子 Agent。"
        "文件有错时指出哪一条、哪个字段，并且不做任何修改。"
    )

    def add_arguments(self, parser):
        parser.add_argument("file", type=Path, help="种子 YAML 文件")
        parser.add_argument("--dry-run", action="store_true", help="只列出将要做的修改，不做任何修改")
        parser.add_argument(
            "--disable-missing", action="store_true", help="停用文件里没有列出的已启用子 Agent"
        )

    def handle(self, *args, file: Path, dry_run: bool, disable_missing: bool, **options):
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"无法读取 {file}：{exc}") from exc
        try:
            plan = subagent_import(text=text, dry_run=dry_run, disable_missing=disable_missing)
        except SeedError as exc:
            raise CommandError(f"{file}：未做任何修改，原因：\n" + "\n".join(exc.lines)) from exc
        prefix = "将" if dry_run else ""
        for line in plan.describe():
            self.stdout.write(prefix + line)
        if dry_run:
            self.stdout.write("试运行（--dry-run）：未做任何修改")
        self.stdout.write(self.style.SUCCESS(plan.summary()))
