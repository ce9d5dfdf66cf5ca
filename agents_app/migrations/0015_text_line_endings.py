"""The texts admin saved with a browser's CRLF line endings, stored with LF as admin now saves
them (campus_agent.base.admin_text): the prompt the model reads, and a sub-agent's description
and example questions. Versions already in the history are left as they were."""
from django.db import migrations

TEXTS = (("agents_app", "Agent", ("system_prompt",)),
         ("subagents_app", "SubAgent", ("description", "example_questions")))


def line_endings_normalise(apps, schema_editor):
    for app_label, model_name, fields in TEXTS:
        model = apps.get_model(app_label, model_name)
        for row in model.objects.only("pk", *fields).iterator():
            changed = {name: getattr(row, name).replace("\r\n", "\n").replace("\r", "\n") for name in fields
                       if "\r" in getattr(row, name)}
            if changed:
                model.objects.filter(pk=row.pk).update(**changed)


class Migration(migrations.Migration):

    dependencies = [
        ('agents_app', '0014_mcpservice_oauth_origins'),
        ('subagents_app', '0008_history'),
    ]

    operations = [
        migrations.RunPython(line_endings_normalise, migrations.RunPython.noop),
    ]
