"""One run per conversation at a time (docs/design.md#runs), held by the database.

Before the constraint, a conversation could hold several runs that had not ended (two questions
sent at once). The newest of each stays; the older ones are ended as interrupted, as the reaper
ends a run whose worker died, so the constraint can be created.
"""
from django.db import migrations, models
from django.db.models import Count
from django.utils import timezone

ACTIVE = ["running", "waiting"]


def older_active_runs_end(apps, schema_editor):
    Run = apps.get_model("chat_app", "Run")
    crowded = (Run.objects.filter(status__in=ACTIVE).values("conversation_id")
               .annotate(n=Count("id")).filter(n__gt=1).values_list("conversation_id", flat=True))
    for conversation_id in crowded:
        runs = Run.objects.filter(conversation_id=conversation_id, status__in=ACTIVE).order_by("-started_at")
        older = [run.id for run in runs[1:]]
        Run.objects.filter(id__in=older).update(status="interrupted", ended_at=timezone.now(), partial_text="")


class Migration(migrations.Migration):

    dependencies = [
        ("chat_app", "0017_wait"),
    ]

    operations = [
        migrations.RunPython(older_active_runs_end, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="run",
            constraint=models.UniqueConstraint(
                condition=models.Q(("status__in", ["running", "waiting"])),
                fields=("conversation",),
                name="run_one_active_per_conversation",
            ),
        ),
    ]
