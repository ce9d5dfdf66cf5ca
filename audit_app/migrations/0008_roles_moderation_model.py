"""The 安全管理员 role gets the moderation model (audit_app/roles.py): the roles applied again once
its table exists (0003's step, run again; it puts each role back to exactly its list)."""

from importlib import import_module

from django.db import migrations

roles_make = import_module("audit_app.migrations.0003_staff_roles").roles_make


class Migration(migrations.Migration):
    dependencies = [
        ("audit_app", "0007_report_events"),
        ("safety_app", "0003_moderation_model"),
    ]

    operations = [migrations.RunPython(roles_make, migrations.RunPython.noop)]
