from django.conf import settings
from django.core.management.base import BaseCommand

from audit_app.chain import audit_purge


class Command(BaseCommand):
    help = "Deletes audit rows older than AUDIT_RETENTION_DAYS, leaving an anchor row the chain is checked from (cron)."

    def handle(self, *args, **options):
        purged = audit_purge()
        self.stdout.write(
            f"purged {purged.count} audit rows older than {settings.AUDIT_RETENTION_DAYS} days"
            + (f" (through #{purged.through_id})" if purged.through_id else "")
        )
