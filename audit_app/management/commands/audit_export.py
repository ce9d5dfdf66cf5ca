import getpass

from django.core.management.base import BaseCommand, CommandError
from django.utils.dateparse import parse_date

from audit_app.export import FORMATS, audit_export
from audit_app.models import AuditEvent


class Command(BaseCommand):
    help = "Exports the audit log as CSV or JSON lines (the export is itself an audit row)."

    def add_arguments(self, parser):
        parser.add_argument("--format", choices=FORMATS, default="jsonl")
        parser.add_argument("--output", help="file to write (default: stdout)")
        parser.add_argument("--actor", help="username")
        parser.add_argument("--event", choices=AuditEvent.Event.values)
        parser.add_argument("--since", help="YYYY-MM-DD, inclusive")
        parser.add_argument("--until", help="YYYY-MM-DD, inclusive")

    def handle(self, *args, **options):
        rows, filters = AuditEvent.objects.all(), {}
        if options["actor"]:
            rows, filters["actor"] = rows.filter(actor_username=options["actor"]), options["actor"]
        if options["event"]:
            rows, filters["event"] = rows.filter(event=options["event"]), options["event"]
        for name, lookup in (("since", "time__date__gte"), ("until", "time__date__lte")):
            if options[name]:
                day = parse_date(options[name])
                if day is None:
                    raise CommandError(f"--{name}: a date as YYYY-MM-DD")
                rows, filters[name] = rows.filter(**{lookup: day}), options[name]
        lines = audit_export(
            queryset=rows,
            fmt=options["format"],
            filters=filters,
            actor_username=f"manage.py audit_export ({getpass.getuser()})",
        )
        if not options["output"]:
            for line in lines:
                self.stdout.write(line, ending="")
            return
        with open(options["output"], "w", encoding="utf-8", newline="") as out:
            out.writelines(lines)
