"""`manage.py purge_conversations [--older-than DAYS] [--dry-run]`: deletes the conversations
whose last exchange is older than DAYS (default RETENTION_DAYS), with their messages, runs,
ratings and attachments, and the attachments uploaded over a day ago and never sent — for cron
(docs/operations.md, "Retention")."""
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from chat_app.conversations.privacy import conversations_purge
from chat_app.conversations.uploads import uploads_unsent_purge


class Command(BaseCommand):
    help = "删除最后一次对话早于 N 天的对话（默认 RETENTION_DAYS），连同消息、运行记录和评价。"

    def add_arguments(self, parser):
        parser.add_argument("--older-than", type=int, dest="days", help="天数（≥ 1）；不填时用 RETENTION_DAYS")
        parser.add_argument("--dry-run", action="store_true", help="只数出会删除多少个，不删除")

    def handle(self, *args, days=None, dry_run=False, **options):
        days = days if days is not None else settings.RETENTION_DAYS
        if not days:
            raise CommandError("未设置保留天数：请用 --older-than DAYS，或设置 RETENTION_DAYS。")
        if days < 1:
            raise CommandError("--older-than 至少为 1 天。")
        count = conversations_purge(older_than_days=days, dry_run=dry_run)
        unsent = uploads_unsent_purge(dry_run=dry_run)
        verb = "将删除" if dry_run else "已删除"
        self.stdout.write(f"{verb} {count} 个 {days} 天前的对话，{unsent} 个一天前上传却没有发送的附件。")
