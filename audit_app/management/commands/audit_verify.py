from django.core.management.base import BaseCommand, CommandError

from audit_app.chain import audit_verify
from audit_app.models import AuditChainHead


class Command(BaseCommand):
    help = "Walks the audit chain; names every changed, inserted or missing row (exit 1 when there is one)."

    def handle(self, *args, **options):
        checked, problems = audit_verify()
        for problem in problems:
            self.stderr.write(str(problem))
        if problems:
            raise CommandError(f"audit chain broken: {len(problems)} problem(s) in {checked} rows")
        head = AuditChainHead.objects.filter(pk=1).first()
        self.stdout.write(
            f"audit chain intact: {checked} rows; head #{head.last_id if head else 0} {head.last_hash if head else '-'}"
        )
