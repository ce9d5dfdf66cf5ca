"""`manage.py export_catalog [FILE]`: the whole catalog as catalog YAML (docs/staff.md)."""
from pathlib import Path

from django.core.management.base import BaseCommand

from insights_app.catalog.service import catalog_export


class Command(BaseCommand):
    help = (
        "把整个目录（MCP 服务、子 Agent、智能体、路由用例）以目录 YAML 格式写入 FILE（不给则输出到标准输出）。"
        "像密钥的值导出为 ${ENV:变量名} 引用，并在标准错误上提示。"
    )

    def add_arguments(self, parser):
        parser.add_argument("file", nargs="?", type=Path, help="输出文件（默认：标准输出）")

    def handle(self, *args, file: Path | None, **options):
        export = catalog_export()
        for line in export.warnings:
            self.stderr.write(self.style.WARNING(f"警告：{line}"))
        if file is None:
            self.stdout.write(export.text, ending="")
            return
        file.write_text(export.text, encoding="utf-8")
        self.stdout.write(f"已写入 {file}")
