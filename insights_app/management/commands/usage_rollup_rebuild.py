"""`manage.py usage_rollup_rebuild [--since DATE]`: recompute the daily usage from the messages."""
from datetime import date

from django.core.management.base import BaseCommand, CommandError

from insights_app.usage import usage_rollup_rebuild


class Command(BaseCommand):
    help = (
        "按已保存的消息重新计算每日用量（部署本功能之前的对话、恢复备份之后用）。"
        "注意：已被学生删除的对话不在消息里，重算会丢掉它们的用量。"
    )

    def add_arguments(self, parser):
        parser.add_argument("--since", metavar="YYYY-MM-DD", help="只重算这一天及以后（默认：全部）。")

    def handle(self, *args, since=None, **options):
        try:
            start = date.fromisoformat(since) if since else None
        except ValueError as exc:
            raise CommandError("--since 应为 YYYY-MM-DD。") from exc
        written = usage_rollup_rebuild(since=start)
        self.stdout.write(f"每日用量已重算：{written} 行。")
