"""`manage.py import_catalog FILE [--dry-run]`: an operator's command (docs/staff.md).

It writes MCP configs, stdio commands included, without admin's superuser checks: whoever runs
it has shell access on the server already. It warns of each stdio service it creates or changes,
and refuses a file that reads an environment variable staff did not allow (CATALOG_ENV_ALLOWED,
docs/security.md): the file may come from someone else, and its shell holds the server's secrets."""
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from insights_app.catalog.fileformat import MAX_FILE_BYTES, CatalogError
from insights_app.catalog.service import catalog_import


class Command(BaseCommand):
    help = (
        "按标识/名称从目录 YAML 文件新建或更新 MCP 服务、子 Agent、智能体和路由用例；从不删除。"
        "文件有错时指出每一处并且不做任何修改。${ENV:变量名} 引用在导入时从环境变量读取，"
        "只能读取 CATALOG_ENV_ALLOWED 允许的变量（默认 MCP_*），从不读取本服务器自己的设置。"
    )

    def add_arguments(self, parser):
        parser.add_argument("file", type=Path, help="目录 YAML 文件")
        parser.add_argument("--dry-run", action="store_true", help="只列出将要做的修改（逐个字段）、文件让服务器连接的地址和读取的环境变量，不做任何修改")

    def handle(self, *args, file: Path, dry_run: bool, **options):
        try:
            with file.open("rb") as fh:
                data = fh.read(MAX_FILE_BYTES + 1)  # a huge file is never read whole
            if len(data) > MAX_FILE_BYTES:
                raise CommandError(f"{file}：未做任何修改，原因：文件超过 {MAX_FILE_BYTES // 1024} KB 的上限")
            text = data.decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"无法读取 {file}：{exc}") from exc
        try:
            report = catalog_import(text=text, dry_run=dry_run)
        except CatalogError as exc:
            raise CommandError(f"{file}：未做任何修改，原因：\n" + "\n".join(exc.lines)) from exc
        for line in report.warnings:
            self.stderr.write(self.style.WARNING(line))
        for line in report.describe(dry_run=dry_run):
            self.stdout.write(line)
        if dry_run:
            self.stdout.write("试运行（--dry-run）：未做任何修改")
        self.stdout.write(self.style.SUCCESS(report.summary()))
