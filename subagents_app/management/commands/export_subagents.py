from pathlib import Path

from django.core.management.base import BaseCommand

from subagents_app.services import subagent_export


class Command(BaseCommand):
    help = "把所有子 Agent 按名称排序，以种子 YAML 格式写入 FILE（不给则输出到标准输出）。"

    def add_arguments(self, parser):
        parser.add_argument("file", nargs="?", type=Path, help="输出文件（默认：标准输出）")

    def handle(self, *args, file: Path | None, **options):
        text = subagent_export()
        if file is None:
            self.stdout.write(text, ending="")
            return
        file.write_text(text, encoding="utf-8")
        self.stdout.write(f"已写入 {file}")
